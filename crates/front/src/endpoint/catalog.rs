//! What an endpoint's sources offer, merged (issue 31 §2, §4): each source's last list of
//! each kind, the merged lists the endpoint's clients see, and the tables that route a call
//! back to its source (exposed tool and prompt names, resource URIs, resource templates).
//!
//! Owns: the per-source lists and the routing tables. A source whose list could not be had
//! keeps its last one (stable discovery: a tool of a source that is down stays listed, as
//! its own cached answer marks it), and a source never listed is named as missing.

use super::names::{claimed, exposed, owner};
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use support::logging::LogBudget;
use tracing::warn;

/// How many [`claimed`] forms a tool or prompt tries before it is left out of the list (each
/// taken only by a name of its own source, which that source chose).
const CLAIM_ATTEMPTS: u32 = 4;

/// Collision lines logged per minute, for every endpoint together (an upstream chooses its
/// names, and every list merges again).
const COLLISIONS_LOGGED: u32 = 8;

static COLLISIONS: Mutex<LogBudget> =
    Mutex::new(LogBudget::new(COLLISIONS_LOGGED, Duration::from_secs(60)));

/// Whether a collision line may be logged now: the lines suppressed since the last one.
fn collision_log() -> Option<u64> {
    COLLISIONS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .allow(Instant::now())
}

/// The four lists an endpoint merges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ListKind {
    /// `tools/list`.
    Tools,
    /// `prompts/list`.
    Prompts,
    /// `resources/list`.
    Resources,
    /// `resources/templates/list`.
    Templates,
}

impl ListKind {
    /// Every kind.
    pub const ALL: [ListKind; 4] = [
        ListKind::Tools,
        ListKind::Prompts,
        ListKind::Resources,
        ListKind::Templates,
    ];

    /// The list request's method.
    pub fn method(self) -> &'static str {
        match self {
            ListKind::Tools => "tools/list",
            ListKind::Prompts => "prompts/list",
            ListKind::Resources => "resources/list",
            ListKind::Templates => "resources/templates/list",
        }
    }

    /// The kind a list method asks for.
    pub fn of_method(method: &str) -> Option<ListKind> {
        ListKind::ALL.into_iter().find(|k| k.method() == method)
    }

    /// The result's array member.
    pub fn field(self) -> &'static str {
        match self {
            ListKind::Tools => "tools",
            ListKind::Prompts => "prompts",
            ListKind::Resources => "resources",
            ListKind::Templates => "resourceTemplates",
        }
    }

    /// The notification that says this list changed (templates share the resources one).
    pub fn changed(self) -> &'static str {
        match self {
            ListKind::Tools => "notifications/tools/list_changed",
            ListKind::Prompts => "notifications/prompts/list_changed",
            ListKind::Resources | ListKind::Templates => "notifications/resources/list_changed",
        }
    }

    /// The kinds a list-changed notification announces.
    pub fn of_changed(method: &str) -> &'static [ListKind] {
        match method {
            "notifications/tools/list_changed" => &[ListKind::Tools],
            "notifications/prompts/list_changed" => &[ListKind::Prompts],
            "notifications/resources/list_changed" => &[ListKind::Resources, ListKind::Templates],
            _ => &[],
        }
    }
}

/// One value per list kind.
#[derive(Debug, Clone, Default)]
struct PerKind<T> {
    tools: T,
    prompts: T,
    resources: T,
    templates: T,
}

impl<T> PerKind<T> {
    fn get(&self, kind: ListKind) -> &T {
        match kind {
            ListKind::Tools => &self.tools,
            ListKind::Prompts => &self.prompts,
            ListKind::Resources => &self.resources,
            ListKind::Templates => &self.templates,
        }
    }

    fn get_mut(&mut self, kind: ListKind) -> &mut T {
        match kind {
            ListKind::Tools => &mut self.tools,
            ListKind::Prompts => &mut self.prompts,
            ListKind::Resources => &mut self.resources,
            ListKind::Templates => &mut self.templates,
        }
    }
}

/// Where a tool or prompt of the endpoint comes from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Route {
    /// The source's index in the endpoint's `servers`.
    pub source: usize,
    /// The name the source gave it.
    pub name: String,
}

/// A URI template split into its literal pieces (`{…}` expressions removed).
#[derive(Debug, Clone)]
struct Template {
    source: usize,
    pieces: Vec<String>,
    /// Whether the template begins and ends with a literal (else that end matches anything).
    open_start: bool,
    open_end: bool,
}

impl Template {
    fn parse(source: usize, t: &str) -> Template {
        let mut pieces = Vec::new();
        let mut rest = t;
        let open_start = t.starts_with('{');
        let open_end = t.ends_with('}');
        while let Some(start) = rest.find('{') {
            if start > 0 {
                pieces.push(rest[..start].to_string());
            }
            match rest[start..].find('}') {
                Some(end) => rest = &rest[start + end + 1..],
                None => {
                    rest = "";
                    break;
                }
            }
        }
        if !rest.is_empty() {
            pieces.push(rest.to_string());
        }
        Template {
            source,
            pieces,
            open_start,
            open_end,
        }
    }

    /// Whether `uri` could come from this template: its literals in order, anchored at an end
    /// that is literal.
    fn matches(&self, uri: &str) -> bool {
        let mut at = 0;
        for (i, p) in self.pieces.iter().enumerate() {
            let first = i == 0;
            let last = i + 1 == self.pieces.len();
            if first && !self.open_start {
                if !uri.starts_with(p.as_str()) {
                    return false;
                }
                at = p.len();
                if last && !self.open_end {
                    return at == uri.len();
                }
                continue;
            }
            if last && !self.open_end {
                return uri.len() >= at + p.len() && uri.ends_with(p.as_str());
            }
            match uri.get(at..).and_then(|r| r.find(p.as_str())) {
                Some(found) => at += found + p.len(),
                None => return false,
            }
        }
        true
    }
}

/// Catalogs one connection shares with the next ones of an endpoint ([`SharedCatalogs`]); beyond
/// this many keys, the oldest goes.
pub const SHARED: usize = 16;

/// What a shared catalog is valid for: the client's era (2026-07-28: `true`) and which
/// sources it is joined to (lists differ by both; policy applies per connection on top).
pub type SeedKey = (bool, Vec<bool>);

/// The last catalog the connections of one endpoint built, by [`SeedKey`], so a new
/// connection routes a call by name without listing every source first (a 2026-07-28 HTTP
/// request is a connection of its own). A seeded connection still lists when a name misses.
#[derive(Debug, Default)]
pub struct SharedCatalogs {
    slots: std::sync::Mutex<Vec<(SeedKey, Catalog)>>,
}

impl SharedCatalogs {
    /// A copy of the catalog shared for `key`.
    pub fn get(&self, key: &SeedKey) -> Option<Catalog> {
        let slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        slots.iter().find(|(k, _)| k == key).map(|(_, c)| c.clone())
    }

    /// Shares `catalog` for `key` (at most [`SHARED`] keys).
    pub fn put(&self, key: SeedKey, catalog: Catalog) {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        slots.retain(|(k, _)| *k != key);
        if slots.len() >= SHARED {
            slots.remove(0);
        }
        slots.push((key, catalog));
    }
}

/// Per-source lists and the tables built from them, for one endpoint connection.
#[derive(Debug, Clone)]
pub struct Catalog {
    /// The sources' names, in the endpoint's order.
    sources: Vec<String>,
    /// `lists[kind][source]`: the source's last complete list, `None` until one was had.
    lists: PerKind<Vec<Option<Vec<Value>>>>,
    /// Whether each kind was filled (every source asked) during this connection.
    filled: PerKind<bool>,
    tools: HashMap<String, Route>,
    prompts: HashMap<String, Route>,
    /// Resource URI → source, first source in order winning.
    uris: HashMap<String, usize>,
    templates: Vec<Template>,
    /// Names no source may take (the status tool's).
    reserved: Vec<String>,
}

impl Catalog {
    /// An empty catalog for these sources; `reserved` names are never given to a source's
    /// tool.
    pub fn new(sources: Vec<String>, reserved: Vec<String>) -> Catalog {
        let n = sources.len();
        Catalog {
            sources,
            lists: PerKind {
                tools: vec![None; n],
                prompts: vec![None; n],
                resources: vec![None; n],
                templates: vec![None; n],
            },
            filled: PerKind::default(),
            tools: HashMap::new(),
            prompts: HashMap::new(),
            uris: HashMap::new(),
            templates: Vec::new(),
            reserved,
        }
    }

    /// A copy to seed another connection of the endpoint with: its lists and tables, nothing
    /// marked filled (a name it does not know is looked up by listing again).
    pub fn seed(&self) -> Catalog {
        let mut c = self.clone();
        c.filled = PerKind::default();
        c
    }

    /// Whether `other` was built for the same sources.
    pub fn same_sources(&self, other: &Catalog) -> bool {
        self.sources == other.sources
    }

    /// Whether `kind` was listed from every source during this connection.
    pub fn filled(&self, kind: ListKind) -> bool {
        *self.filled.get(kind)
    }

    /// Forgets that `kind` was filled (a source said it changed): the next lookup that
    /// misses lists again.
    pub fn stale(&mut self, kind: ListKind) {
        *self.filled.get_mut(kind) = false;
    }

    /// Records a source's complete list of `kind` (its items as it wrote them).
    pub fn set(&mut self, kind: ListKind, source: usize, items: Vec<Value>) {
        if let Some(slot) = self.lists.get_mut(kind).get_mut(source) {
            *slot = Some(items);
        }
    }

    /// Whether the source ever gave a list of `kind`.
    pub fn known(&self, kind: ListKind, source: usize) -> bool {
        self.lists
            .get(kind)
            .get(source)
            .is_some_and(Option::is_some)
    }

    /// Rebuilds `kind`'s routing table and returns the merged list the clients see: tools and
    /// prompts renamed (`SOURCE__NAME`) with `_meta["mcp-supervisor/source"]`, resources and
    /// templates as they are. Marks `kind` filled.
    ///
    /// Names (issue 47 §3): an item keeps its plain name ([`exposed`]) when that belongs to its
    /// own source by [`owner`] (the longest configured source whose `SOURCE__` starts it) and
    /// is free; otherwise (another source owns the spelling, an earlier item or the reserved
    /// status tool has it) it gets [`claimed`], the first of [`CLAIM_ATTEMPTS`] that is its
    /// own and free, or is left out. So every exposed name is unique, routes back to exactly
    /// the (source, name) it came from, and no spelling is owned by another source than the
    /// one its `_meta` names. A source listing the same name twice is listed once. Collisions
    /// are logged within [`COLLISIONS_LOGGED`] lines a minute (an upstream picks its names).
    pub fn merge(&mut self, kind: ListKind, endpoint: &str) -> Vec<Value> {
        *self.filled.get_mut(kind) = true;
        let mut out = Vec::new();
        match kind {
            ListKind::Tools | ListKind::Prompts => {
                let mut table: HashMap<String, Route> = HashMap::new();
                let mut listed: HashSet<Route> = HashSet::new();
                for (source, items) in self.lists.get(kind).iter().enumerate() {
                    let Some(items) = items else { continue };
                    let sname = self.sources.get(source).cloned().unwrap_or_default();
                    for item in items {
                        let Some(name) = item.get("name").and_then(Value::as_str) else {
                            continue;
                        };
                        let route = Route {
                            source,
                            name: name.to_string(),
                        };
                        if !listed.insert(route.clone()) {
                            continue;
                        }
                        let plain = exposed(&sname, name);
                        let fits = |e: &str| {
                            owner(&self.sources, e).is_none_or(|(o, _)| o == sname)
                                && !table.contains_key(e)
                                && !self.reserved.iter().any(|r| r == e)
                        };
                        let e = if fits(&plain) {
                            plain
                        } else {
                            let other = (0..CLAIM_ATTEMPTS)
                                .map(|k| claimed(&sname, name, k))
                                .find(|c| fits(c));
                            let why = match owner(&self.sources, &plain) {
                                Some((o, _)) if o != sname => {
                                    "its plain name is spelled with another source's prefix"
                                }
                                _ => "another tool or prompt of this endpoint has its plain name",
                            };
                            if let Some(suppressed) = collision_log() {
                                warn!(endpoint, source = %sname, name, exposed = %plain,
                                    instead = other.as_deref().unwrap_or("(left out)"), why, suppressed,
                                    "a tool or prompt of this endpoint gets a hashed name");
                            }
                            match other {
                                Some(o) => o,
                                None => continue,
                            }
                        };
                        let mut item = item.clone();
                        if let Some(o) = item.as_object_mut() {
                            o.insert("name".into(), Value::String(e.clone()));
                            let meta = o.entry("_meta").or_insert_with(|| json!({}));
                            if let Some(m) = meta.as_object_mut() {
                                m.insert("mcp-supervisor/source".into(), json!(sname));
                            }
                        }
                        out.push(item);
                        table.insert(e, route);
                    }
                }
                if kind == ListKind::Tools {
                    self.tools = table;
                } else {
                    self.prompts = table;
                }
            }
            ListKind::Resources => {
                let mut uris: HashMap<String, usize> = HashMap::new();
                for (source, items) in self.lists.get(kind).iter().enumerate() {
                    let Some(items) = items else { continue };
                    for item in items {
                        let Some(uri) = item.get("uri").and_then(Value::as_str) else {
                            continue;
                        };
                        if let Some(first) = uris.get(uri) {
                            warn!(endpoint, uri,
                                winner = %self.sources.get(*first).map_or("", String::as_str),
                                other = %self.sources.get(source).map_or("", String::as_str),
                                "two sources of this endpoint offer the same resource URI; the first in `servers` wins");
                            continue;
                        }
                        uris.insert(uri.to_string(), source);
                        out.push(item.clone());
                    }
                }
                self.uris = uris;
            }
            ListKind::Templates => {
                let mut templates = Vec::new();
                for (source, items) in self.lists.get(kind).iter().enumerate() {
                    let Some(items) = items else { continue };
                    for item in items {
                        let Some(t) = item.get("uriTemplate").and_then(Value::as_str) else {
                            continue;
                        };
                        templates.push(Template::parse(source, t));
                        out.push(item.clone());
                    }
                }
                self.templates = templates;
            }
        }
        out
    }

    /// The source and original name of exposed tool `name`.
    pub fn tool(&self, name: &str) -> Option<&Route> {
        self.tools.get(name)
    }

    /// The source and original name of exposed prompt `name`.
    pub fn prompt(&self, name: &str) -> Option<&Route> {
        self.prompts.get(name)
    }

    /// The source and original name of exposed tool (`kind` [`ListKind::Tools`]) or prompt
    /// (any other kind) `name`.
    pub fn named(&self, kind: ListKind, name: &str) -> Option<&Route> {
        if kind == ListKind::Tools {
            self.tool(name)
        } else {
            self.prompt(name)
        }
    }

    /// The name of source `source` (an index into the endpoint's `servers`).
    pub fn source_name(&self, source: usize) -> &str {
        self.sources.get(source).map_or("", String::as_str)
    }

    /// The source of resource `uri`: a listed resource, else the first template (in source
    /// order) it matches.
    pub fn resource(&self, uri: &str) -> Option<usize> {
        if let Some(s) = self.uris.get(uri) {
            return Some(*s);
        }
        self.templates
            .iter()
            .find(|t| t.matches(uri))
            .map(|t| t.source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str) -> Value {
        json!({"name": name, "inputSchema": {"type": "object"}})
    }

    #[test]
    fn tools_are_prefixed_and_routed_back_to_their_source() {
        let mut c = Catalog::new(vec!["a".into(), "b".into()], vec![]);
        c.set(ListKind::Tools, 0, vec![tool("search")]);
        c.set(ListKind::Tools, 1, vec![tool("search"), tool("fetch")]);
        let merged = c.merge(ListKind::Tools, "ep");
        let names: Vec<&str> = merged.iter().filter_map(|t| t["name"].as_str()).collect();
        assert_eq!(names, ["a__search", "b__search", "b__fetch"]);
        assert_eq!(merged[1]["_meta"]["mcp-supervisor/source"], "b");
        assert_eq!(
            c.tool("b__search"),
            Some(&Route {
                source: 1,
                name: "search".into()
            })
        );
        assert!(c.tool("search").is_none());
    }

    /// Each merged item's exposed name and `_meta` source.
    fn named(merged: &[Value]) -> Vec<(String, String)> {
        merged
            .iter()
            .map(|t| {
                (
                    t["name"].as_str().unwrap_or("").to_string(),
                    t["_meta"]["mcp-supervisor/source"]
                        .as_str()
                        .unwrap_or("")
                        .to_string(),
                )
            })
            .collect()
    }

    #[test]
    fn a_spelling_another_source_owns_is_claimed_under_its_own_prefix_in_any_order() {
        // Issue 47 N19's kind: `a` + `_b` and `a_` + `b` both spell `a___b`, whose longest
        // prefix is `a_`'s; `a`'s `b__echo` stays `a__b__echo` (no source `a__b` can exist).
        for order in [["a", "a_"], ["a_", "a"]] {
            let sources: Vec<String> = order.iter().map(|s| s.to_string()).collect();
            let ia = sources.iter().position(|s| s == "a").unwrap();
            let mut c = Catalog::new(sources.clone(), vec![]);
            c.set(ListKind::Tools, ia, vec![tool("_b"), tool("b__echo")]);
            c.set(ListKind::Tools, 1 - ia, vec![tool("b")]);
            let merged = named(&c.merge(ListKind::Tools, "ep"));
            assert_eq!(merged.len(), 3, "{merged:?}");
            assert_eq!(
                c.tool("a___b"),
                Some(&Route {
                    source: 1 - ia,
                    name: "b".into()
                })
            );
            assert_eq!(c.tool("a__b__echo").map(|r| r.source), Some(ia));
            let (claimed, source) = merged
                .iter()
                .find(|(e, _)| c.tool(e).is_some_and(|r| r.name == "_b"))
                .unwrap();
            assert_eq!(source, "a");
            assert!(claimed.starts_with("a__b-"), "{claimed}");
            assert_eq!(owner(&sources, claimed).map(|(o, _)| o), Some("a"));
        }
    }

    #[test]
    fn a_name_listed_twice_by_its_source_is_listed_once_and_a_same_source_clash_is_claimed() {
        let mut c = Catalog::new(vec!["s".into()], vec![]);
        let dotted = exposed("s", "x.y");
        let clash = dotted.strip_prefix("s__").unwrap().to_string();
        c.set(
            ListKind::Tools,
            0,
            vec![tool("x.y"), tool("x.y"), tool(&clash)],
        );
        let merged = named(&c.merge(ListKind::Tools, "ep"));
        assert_eq!(merged.len(), 2, "{merged:?}");
        assert_eq!(c.tool(&dotted).map(|r| r.name.as_str()), Some("x.y"));
        let other = &merged[1].0;
        assert_ne!(other, &dotted);
        assert_eq!(c.tool(other).map(|r| r.name.as_str()), Some(clash.as_str()));
    }

    #[test]
    fn a_source_too_long_for_its_prefix_gets_names_no_source_owns() {
        let long = "l".repeat(60);
        let sources = vec![long.clone(), "l".repeat(53)];
        let mut c = Catalog::new(sources.clone(), vec![]);
        c.set(ListKind::Tools, 0, vec![tool(&"t".repeat(10))]);
        c.set(ListKind::Tools, 1, vec![tool(&"u".repeat(30))]);
        let merged = named(&c.merge(ListKind::Tools, "ep"));
        for (e, s) in &merged {
            assert!(super::super::names::is_portable(e), "{e}");
            let o = owner(&sources, e).map(|(o, _)| o);
            if s.len() <= 53 {
                assert_eq!(o, Some(s.as_str()), "{e}");
            } else {
                assert_eq!(o, None, "{e}");
            }
        }
    }

    #[test]
    fn the_reserved_status_tool_name_is_never_a_sources() {
        let mut c = Catalog::new(vec!["a".into()], vec!["a__status".into()]);
        c.set(ListKind::Tools, 0, vec![tool("status")]);
        let merged = c.merge(ListKind::Tools, "ep");
        assert_ne!(merged[0]["name"], "a__status");
        assert!(c.tool("a__status").is_none());
    }

    #[test]
    fn resources_route_by_uri_and_template_first_source_winning() {
        let mut c = Catalog::new(vec!["a".into(), "b".into()], vec![]);
        c.set(
            ListKind::Resources,
            0,
            vec![json!({"uri": "file:///x", "name": "x"})],
        );
        c.set(
            ListKind::Resources,
            1,
            vec![
                json!({"uri": "file:///x", "name": "x"}),
                json!({"uri": "file:///y", "name": "y"}),
            ],
        );
        assert_eq!(c.merge(ListKind::Resources, "ep").len(), 2);
        c.set(
            ListKind::Templates,
            0,
            vec![json!({"uriTemplate": "db://{table}/rows", "name": "t"})],
        );
        c.set(
            ListKind::Templates,
            1,
            vec![json!({"uriTemplate": "db://{table}/{row}", "name": "t"})],
        );
        c.merge(ListKind::Templates, "ep");
        assert_eq!(c.resource("file:///x"), Some(0));
        assert_eq!(c.resource("file:///y"), Some(1));
        assert_eq!(c.resource("db://users/rows"), Some(0));
        assert_eq!(c.resource("db://users/7"), Some(1));
        assert_eq!(c.resource("http://elsewhere"), None);
    }

    use proptest::prelude::*;

    /// Source names without `__` (as configuration makes them), unique, short (collisions
    /// by `_` next to the separator) or long (no room for a prefix).
    fn source_names() -> impl Strategy<Value = Vec<String>> {
        proptest::collection::vec(prop_oneof![4 => "[a_]{1,4}", 1 => "[a-z0-9_-]{1,70}"], 1..5)
            .prop_map(|v| {
                let mut out: Vec<String> = Vec::new();
                for s in v {
                    if !s.contains("__") && !out.contains(&s) {
                        out.push(s);
                    }
                }
                out
            })
            .prop_filter("at least one source", |v| !v.is_empty())
    }

    proptest! {
        /// Issue 47 §3: whatever the sources are named and whatever names they offer, every
        /// exposed name is unique and portable, routes back to exactly the (source, name) it
        /// came from, its `_meta` names that source, and the longest-prefix owner of its
        /// spelling is that source (none for a source too long for its prefix).
        #[test]
        fn every_exposed_name_is_unique_and_owned_by_the_source_it_routes_to(
            sources in source_names(),
            lists in proptest::collection::vec(
                proptest::collection::vec(prop_oneof![4 => "[ab_.]{0,6}", 1 => "\\PC{0,70}"], 0..6),
                5,
            ),
            reserve in proptest::option::of("[a_]{1,4}__[ab_]{1,3}"),
        ) {
            let reserved: Vec<String> = reserve.into_iter().collect();
            let mut c = Catalog::new(sources.clone(), reserved.clone());
            let mut offered: Vec<(usize, String)> = Vec::new();
            for (i, names) in lists.iter().enumerate().take(sources.len()) {
                let items = names
                    .iter()
                    .map(|n| json!({"name": n, "title": n}))
                    .collect();
                c.set(ListKind::Tools, i, items);
                for n in names {
                    if !offered.contains(&(i, n.clone())) {
                        offered.push((i, n.clone()));
                    }
                }
            }
            let merged = c.merge(ListKind::Tools, "ep");
            prop_assert_eq!(merged.len(), offered.len(), "nothing left out: {:?}", merged);
            let mut seen = std::collections::HashSet::new();
            for item in &merged {
                let e = item["name"].as_str().unwrap_or("");
                prop_assert!(seen.insert(e.to_string()), "{} twice", e);
                prop_assert!(super::super::names::is_portable(e), "{}", e);
                prop_assert!(!reserved.iter().any(|r| r == e), "{}", e);
                let route = c.tool(e).cloned();
                let source = route.as_ref().map(|r| r.source);
                let meta = item["_meta"]["mcp-supervisor/source"].as_str();
                prop_assert_eq!(meta, source.map(|s| c.source_name(s)), "{}", e);
                prop_assert_eq!(
                    route.as_ref().map(|r| r.name.as_str()),
                    item["title"].as_str(),
                    "{}", e
                );
                let s = meta.unwrap_or("");
                let o = owner(&sources, e).map(|(o, _)| o);
                if s.len() <= 53 {
                    prop_assert_eq!(o, Some(s), "{} in {:?}", e, sources);
                } else {
                    prop_assert!(o.is_none() || o == Some(s), "{} in {:?}", e, sources);
                }
            }
        }
    }

    #[test]
    fn template_matching_anchors_literal_ends() {
        let t = Template::parse(0, "repo://{owner}/{name}/readme");
        assert!(t.matches("repo://a/b/readme"));
        assert!(!t.matches("repo://a/b/readme/x"));
        assert!(!t.matches("rep://a/b/readme"));
        let open = Template::parse(0, "{+path}");
        assert!(open.matches("anything"));
    }
}
