//! `adopt --endpoint NAME` (issue 31 §6): instead of one `attach SERVER` entry per server,
//! each client's servers object gets one entry, `NAME`, that runs `attach NAME`, and the
//! supervisor config an `[endpoints.NAME]` serving every server those entries ran.
//!
//! Owns: which client entries fold into the endpoint's one entry, and which servers the
//! endpoint must serve. Pure: it reads the plan and the found entries, and returns the
//! decision; `mod.rs` turns it into edits, `supervisor.rs` into the config text.

use super::entry::Verdict;
use super::plan::{Found, Plan};
use super::supervisor::Current;
use super::AdoptError;

/// What `--endpoint NAME` does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fold {
    /// The endpoint's name.
    pub name: String,
    /// Servers to add to `[endpoints.NAME] servers` (all of them when the table is new),
    /// in the order their first entry was found.
    pub added: Vec<String>,
    /// Every server the endpoint serves after adoption (its list as it was, then `added`);
    /// `["*"]` when it already serves every server.
    pub servers: Vec<String>,
    /// Whether `[endpoints.NAME]` is already in the supervisor config.
    pub exists: bool,
    /// Indexes into the found entries that go (folded into the one entry); the first in each
    /// servers object becomes the endpoint's entry unless that object already has one.
    pub folded: Vec<usize>,
    /// Users (not the running one) whose servers the endpoint serves: they are given
    /// `allowed_uids` on it, and their clients reach it by its socket.
    pub users: Vec<u32>,
}

impl Fold {
    /// Whether the supervisor config may change for the endpoint (a new table, servers to
    /// add, or users to allow).
    pub fn changes_config(&self) -> bool {
        !self.exists || !self.added.is_empty() || !self.users.is_empty()
    }
}

/// Whether `name` can name an endpoint: `[a-z0-9_-]+`, not `control`.
fn valid(name: &str) -> bool {
    !name.is_empty()
        && name != "control"
        && name
            .bytes()
            .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-'))
}

/// Decides the fold for endpoint `name`: the entries `plan` adopts and those that already
/// attach to one of `current`'s servers fold into one entry per servers object.
///
/// Errors (usage, exit 2): a bad name; a name that is a server's (in the config or in the
/// plan); a servers object whose entry `name` is something else (a remote server, a skipped
/// entry), which would be lost.
pub fn fold(
    name: &str,
    plan: &Plan,
    found: &[Found],
    current: &Current,
) -> Result<Fold, AdoptError> {
    if !valid(name) {
        return Err(AdoptError::Usage(format!(
            "--endpoint {name:?}: endpoint names match [a-z0-9_-]+ (and `control` is reserved)"
        )));
    }
    if current.servers.iter().any(|(n, _)| n == name) || plan.servers.iter().any(|s| s.name == name)
    {
        return Err(AdoptError::Usage(format!(
            "--endpoint {name}: `{name}` is a server's name; endpoints and servers share one namespace, choose another"
        )));
    }
    let known = |n: &str| current.servers.iter().any(|(s, _)| s == n);
    let mut servers_found: Vec<String> = Vec::new();
    let mut folded = Vec::new();
    let mut users = Vec::new();
    for (i, f) in found.iter().enumerate() {
        let server = match (&f.verdict, plan.server_of(i)) {
            (Verdict::Adopt(_), Some(s)) => {
                if let Some(uid) = s.spec.user {
                    users.push(uid);
                }
                Some(s.name.clone())
            }
            (Verdict::Attached(Some(n)), _) if n != name && known(n) => {
                // A server adopted before from another user's files runs as that user.
                let user = current
                    .servers
                    .iter()
                    .find(|(s, _)| s == n)
                    .and_then(|(_, spec)| spec.as_ref()?.user);
                if let Some(uid) = user {
                    users.push(uid);
                }
                Some(n.clone())
            }
            _ => None,
        };
        if let Some(s) = server {
            if !servers_found.contains(&s) {
                servers_found.push(s);
            }
            folded.push(i);
        }
    }
    // An entry named like the endpoint, in an object that gets the endpoint's entry, must be
    // folded itself or already be the endpoint's: anything else would be overwritten.
    for (i, f) in found.iter().enumerate() {
        let gets_entry = folded
            .iter()
            .filter_map(|&j| found.get(j))
            .any(|g| g.file == f.file && g.section == f.section);
        let ours = matches!(&f.verdict, Verdict::Attached(Some(n)) if n == name);
        if f.key == name && gets_entry && !ours && !folded.contains(&i) {
            return Err(AdoptError::Usage(format!(
                "--endpoint {name}: a client file already has an entry `{name}` that is not `attach {name}` and would be replaced; choose another name"
            )));
        }
    }
    users.sort_unstable();
    users.dedup();
    let existing = current.endpoints.iter().find(|(n, _)| n == name);
    let (exists, mut servers) = match existing {
        Some((_, list)) => (true, list.clone()),
        None => (false, Vec::new()),
    };
    let every = servers.iter().any(|s| s == "*");
    let added: Vec<String> = if every {
        Vec::new()
    } else {
        servers_found
            .into_iter()
            .filter(|s| !servers.contains(s))
            .collect()
    };
    if !every {
        servers.extend(added.iter().cloned());
    }
    Ok(Fold {
        name: name.to_string(),
        added,
        servers,
        exists,
        folded,
        users,
    })
}

/// What becomes of the folded entries `keys` of one servers object (file order): the one that
/// runs `attach NAME` under the key `name` (`true`: the entry already keyed `name`, else the
/// first), the rest removed (`false`); all removed when the object already has the endpoint's
/// entry (`has_endpoint`).
pub fn in_object(keys: &[String], name: &str, has_endpoint: bool) -> Vec<(String, bool)> {
    let keeper = if has_endpoint {
        None
    } else {
        Some(keys.iter().position(|k| k == name).unwrap_or(0))
    };
    keys.iter()
        .enumerate()
        .map(|(i, k)| (k.clone(), Some(i) == keeper))
        .collect()
}
