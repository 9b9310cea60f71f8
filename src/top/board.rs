//! What `top` shows and how keys change it (issue 33 §1): the servers and endpoints as the
//! last `watch` lines left them, the selection, the sort, the filter and the last message.
//! Pure: keys come in as crossterm events, verbs go out as [`Action`]s the shell runs, and
//! the stream's lines come in as JSON (`control::watch`'s format 1).
//!
//! Owns: the board's state. Never reads the socket, the terminal or a clock.

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use serde_json::Value;
use std::collections::BTreeMap;

/// Who the daemon says we are (the snapshot's `role`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Every key works.
    Operator,
    /// Read-only, redacted: the verbs are refused here, visibly, before the daemon would.
    Viewer,
}

/// The order of the server rows (`o` cycles).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sort {
    /// By name.
    Name,
    /// Worst state first (failed, backoff, ... ready), then name.
    State,
    /// Most restarts first.
    Restarts,
    /// Highest error rate first.
    Errors,
    /// Slowest p99 first.
    P99,
}

impl Sort {
    fn next(self) -> Sort {
        match self {
            Sort::Name => Sort::State,
            Sort::State => Sort::Restarts,
            Sort::Restarts => Sort::Errors,
            Sort::Errors => Sort::P99,
            Sort::P99 => Sort::Name,
        }
    }

    /// Its name in the header.
    pub fn name(self) -> &'static str {
        match self {
            Sort::Name => "name",
            Sort::State => "state",
            Sort::Restarts => "restarts",
            Sort::Errors => "errors",
            Sort::P99 => "p99",
        }
    }
}

/// A control verb on one server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// `start`.
    Start,
    /// `stop`.
    Stop,
    /// `restart`.
    Restart,
}

impl Verb {
    /// The verb as the CLI spells it.
    pub fn name(self) -> &'static str {
        match self {
            Verb::Start => "start",
            Verb::Stop => "stop",
            Verb::Restart => "restart",
        }
    }
}

/// What a key asks the shell to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Nothing beyond redrawing.
    None,
    /// Leave, restoring the terminal.
    Quit,
    /// Send this verb for this server on the control socket.
    Verb(Verb, String),
}

/// What kind of thing a row is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A server (a child or a url server).
    Server,
    /// An endpoint: its sources follow as [`Kind::Source`] rows.
    Endpoint,
    /// One source of the endpoint above.
    Source,
}

/// One row of the table.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// What it is.
    pub kind: Kind,
    /// The server's or endpoint's name.
    pub name: String,
    /// Its status as the stream gave it (a server's whole status; for an endpoint its line;
    /// for a source, the source server's status when it has one).
    pub status: Value,
}

/// The board.
#[derive(Debug)]
pub struct Board {
    servers: BTreeMap<String, Value>,
    endpoints: BTreeMap<String, Value>,
    role: Role,
    selected: usize,
    sort: Sort,
    filter: String,
    typing: bool,
    message: Option<String>,
    ended: Option<String>,
}

impl Default for Board {
    fn default() -> Self {
        Board {
            servers: BTreeMap::new(),
            endpoints: BTreeMap::new(),
            role: Role::Viewer,
            selected: 0,
            sort: Sort::Name,
            filter: String::new(),
            typing: false,
            message: None,
            ended: None,
        }
    }
}

/// How bad a state is, for [`Sort::State`] (lower is worse).
fn severity(state: &str) -> u8 {
    match state {
        "failed" => 0,
        "auth_required" => 1,
        "backoff" => 2,
        "starting" => 3,
        "stopping" => 4,
        "stopped" => 5,
        "idle" => 6,
        _ => 7,
    }
}

fn num(v: &Value, path: &[&str]) -> f64 {
    path.iter()
        .try_fold(v, |v, k| v.get(*k))
        .and_then(Value::as_f64)
        .unwrap_or(0.0)
}

impl Board {
    /// Applies one `watch` line (the `watch` member of an answer): a snapshot replaces
    /// everything, a change replaces what it names and drops what it says was removed.
    pub fn apply(&mut self, w: &Value) {
        if w.get("kind").and_then(Value::as_str) == Some("snapshot") {
            self.servers.clear();
            self.endpoints.clear();
            self.role = match w.get("role").and_then(Value::as_str) {
                Some("operator") => Role::Operator,
                _ => Role::Viewer,
            };
        }
        let named = |v: &Value| v.get("name").and_then(Value::as_str).map(str::to_string);
        for s in w
            .get("servers")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(n) = named(s) {
                self.servers.insert(n, s.clone());
            }
        }
        for e in w
            .get("endpoints")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(n) = named(e) {
                self.endpoints.insert(n, e.clone());
            }
        }
        for gone in w
            .get("removed")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(n) = gone.as_str() {
                self.servers.remove(n);
                self.endpoints.remove(n);
            }
        }
        self.clamp();
    }

    /// The stream ended (the supervisor stopped, or the connection broke).
    pub fn end(&mut self, why: String) {
        self.ended = Some(why);
    }

    /// Shows `message` on the message line (a verb's outcome).
    pub fn tell(&mut self, message: String) {
        self.message = Some(message);
    }

    /// The rows in order: servers (sorted, filtered), then each endpoint with its sources.
    pub fn rows(&self) -> Vec<Row> {
        let f = self.filter.to_lowercase();
        let keep = |n: &str| f.is_empty() || n.to_lowercase().contains(&f);
        let mut servers: Vec<(&String, &Value)> =
            self.servers.iter().filter(|(n, _)| keep(n)).collect();
        let state =
            |v: &Value| severity(v.get("state").and_then(Value::as_str).unwrap_or_default());
        match self.sort {
            Sort::Name => {}
            Sort::State => servers.sort_by_key(|(_, v)| state(v)),
            Sort::Restarts => {
                servers.sort_by(|a, b| num(b.1, &["restarts"]).total_cmp(&num(a.1, &["restarts"])))
            }
            Sort::Errors => servers.sort_by(|a, b| {
                num(b.1, &["traffic", "error_rate"])
                    .total_cmp(&num(a.1, &["traffic", "error_rate"]))
            }),
            Sort::P99 => servers.sort_by(|a, b| {
                num(b.1, &["traffic", "p99_ms"]).total_cmp(&num(a.1, &["traffic", "p99_ms"]))
            }),
        }
        let mut rows: Vec<Row> = servers
            .into_iter()
            .map(|(n, v)| Row {
                kind: Kind::Server,
                name: n.clone(),
                status: v.clone(),
            })
            .collect();
        for (n, e) in self.endpoints.iter() {
            let sources: Vec<&Value> = e
                .get("servers")
                .and_then(Value::as_array)
                .map(|a| a.iter().collect())
                .unwrap_or_default();
            if !keep(n)
                && !sources
                    .iter()
                    .any(|s| keep(s["name"].as_str().unwrap_or("")))
            {
                continue;
            }
            rows.push(Row {
                kind: Kind::Endpoint,
                name: n.clone(),
                status: e.clone(),
            });
            for s in sources {
                let name = s["name"].as_str().unwrap_or_default().to_string();
                let status = self
                    .servers
                    .get(&name)
                    .cloned()
                    .unwrap_or_else(|| s.clone());
                rows.push(Row {
                    kind: Kind::Source,
                    name,
                    status,
                });
            }
        }
        rows
    }

    fn clamp(&mut self) {
        let n = self.rows().len();
        self.selected = self.selected.min(n.saturating_sub(1));
    }

    /// The selected row's index among [`Board::rows`].
    pub fn selected(&self) -> usize {
        self.selected
    }

    /// The selected row, if any.
    pub fn selected_row(&self) -> Option<Row> {
        self.rows().into_iter().nth(self.selected)
    }

    /// Who we are.
    pub fn role(&self) -> Role {
        self.role
    }

    /// The sort in force.
    pub fn sort(&self) -> Sort {
        self.sort
    }

    /// The filter, and whether it is being typed.
    pub fn filter(&self) -> (&str, bool) {
        (&self.filter, self.typing)
    }

    /// The message line.
    pub fn message(&self) -> Option<&str> {
        self.message.as_deref()
    }

    /// Why the stream ended, once it has.
    pub fn ended(&self) -> Option<&str> {
        self.ended.as_deref()
    }

    /// How many servers and endpoints the board holds.
    pub fn counts(&self) -> (usize, usize) {
        (self.servers.len(), self.endpoints.len())
    }

    /// One key: moves, filters, sorts, or asks for a verb.
    pub fn on_key(&mut self, k: KeyEvent) -> Action {
        if k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL) {
            return Action::Quit;
        }
        if self.typing {
            match k.code {
                KeyCode::Enter => self.typing = false,
                KeyCode::Esc => {
                    self.typing = false;
                    self.filter.clear();
                }
                KeyCode::Backspace => {
                    self.filter.pop();
                }
                KeyCode::Char(c) if !c.is_control() && self.filter.len() < 64 => {
                    self.filter.push(c)
                }
                _ => {}
            }
            self.selected = 0;
            self.clamp();
            return Action::None;
        }
        let last = self.rows().len().saturating_sub(1);
        match k.code {
            KeyCode::Char('q') | KeyCode::Esc => return Action::Quit,
            KeyCode::Up | KeyCode::Char('k') => self.selected = self.selected.saturating_sub(1),
            KeyCode::Down | KeyCode::Char('j') => self.selected = (self.selected + 1).min(last),
            KeyCode::Home | KeyCode::Char('g') => self.selected = 0,
            KeyCode::End | KeyCode::Char('G') => self.selected = last,
            KeyCode::Char('/') => {
                self.typing = true;
                self.filter.clear();
            }
            KeyCode::Char('o') => {
                self.sort = self.sort.next();
                self.message = Some(format!("sorted by {}", self.sort.name()));
            }
            KeyCode::Char('s') => return self.verb(Verb::Start),
            KeyCode::Char('x') => return self.verb(Verb::Stop),
            KeyCode::Char('r') => return self.verb(Verb::Restart),
            _ => {}
        }
        Action::None
    }

    fn verb(&mut self, verb: Verb) -> Action {
        let Some(row) = self.selected_row() else {
            return Action::None;
        };
        if self.role == Role::Viewer {
            self.message = Some(format!(
                "viewers cannot {}: ask an operator (operator_uids)",
                verb.name()
            ));
            return Action::None;
        }
        if row.kind == Kind::Endpoint {
            self.message = Some(format!(
                "`{}` is an endpoint: select one of its sources to {}",
                row.name,
                verb.name()
            ));
            return Action::None;
        }
        self.message = Some(format!("{} {}…", verb.name(), row.name));
        Action::Verb(verb, row.name)
    }
}

#[cfg(test)]
mod tests {
    use super::{Action, Board, Kind, Role, Sort, Verb};
    use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
    use serde_json::json;

    fn key(c: KeyCode) -> KeyEvent {
        KeyEvent::new(c, KeyModifiers::NONE)
    }

    fn board(role: &str) -> Board {
        let mut b = Board::default();
        b.apply(&json!({"kind": "snapshot", "role": role,
            "servers": [
                {"name": "web", "state": "ready", "restarts": 0, "traffic": {"error_rate": 0.0, "p99_ms": 5.0}},
                {"name": "crashy", "state": "backoff", "restarts": 4, "traffic": {"error_rate": 0.5}},
            ],
            "endpoints": [{"name": "all", "servers": [{"name": "web", "state": "ready"}]}],
            "removed": []}));
        b
    }

    #[test]
    fn rows_are_servers_then_endpoints_with_their_sources() {
        let b = board("operator");
        let rows: Vec<(Kind, String)> = b.rows().into_iter().map(|r| (r.kind, r.name)).collect();
        assert_eq!(
            rows,
            [
                (Kind::Server, "crashy".into()),
                (Kind::Server, "web".into()),
                (Kind::Endpoint, "all".into()),
                (Kind::Source, "web".into()),
            ]
        );
        // The source row carries the source server's whole status.
        assert_eq!(b.rows()[3].status["restarts"], 0);
    }

    #[test]
    fn changes_replace_and_remove_and_the_selection_stays_in_range() {
        let mut b = board("operator");
        b.on_key(key(KeyCode::End));
        assert_eq!(b.selected(), 3);
        b.apply(
            &json!({"kind": "change", "servers": [{"name": "web", "state": "stopped"}],
            "endpoints": [], "removed": ["all", "crashy"]}),
        );
        assert_eq!(b.rows().len(), 1);
        assert_eq!(b.selected(), 0);
        assert_eq!(b.rows()[0].status["state"], "stopped");
    }

    #[test]
    fn an_operator_asks_for_verbs_a_viewer_is_told_no() {
        let mut b = board("operator");
        assert_eq!(b.role(), Role::Operator);
        assert_eq!(
            b.on_key(key(KeyCode::Char('r'))),
            Action::Verb(Verb::Restart, "crashy".into())
        );
        b.on_key(key(KeyCode::Char('j')));
        b.on_key(key(KeyCode::Char('j')));
        assert_eq!(
            b.on_key(key(KeyCode::Char('x'))),
            Action::None,
            "an endpoint"
        );
        assert!(b.message().unwrap().contains("endpoint"));
        let mut v = board("viewer");
        assert_eq!(v.on_key(key(KeyCode::Char('r'))), Action::None);
        assert!(v.message().unwrap().contains("viewers cannot restart"));
        assert_eq!(v.on_key(key(KeyCode::Char('q'))), Action::Quit);
        assert_eq!(
            v.on_key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL)),
            Action::Quit
        );
    }

    #[test]
    fn filter_and_sort() {
        let mut b = board("operator");
        b.on_key(key(KeyCode::Char('/')));
        for c in "we".chars() {
            b.on_key(key(KeyCode::Char(c)));
        }
        b.on_key(key(KeyCode::Enter));
        let names: Vec<String> = b.rows().into_iter().map(|r| r.name).collect();
        assert_eq!(names, ["web", "all", "web"]);
        // Typing a filter does not quit on q.
        b.on_key(key(KeyCode::Char('/')));
        assert_eq!(b.on_key(key(KeyCode::Char('q'))), Action::None);
        b.on_key(key(KeyCode::Esc));
        assert_eq!(b.filter(), ("", false));
        b.on_key(key(KeyCode::Char('o')));
        assert_eq!(b.sort(), Sort::State);
        assert_eq!(b.rows()[0].name, "crashy");
        b.on_key(key(KeyCode::Char('o')));
        b.on_key(key(KeyCode::Char('o')));
        assert_eq!(b.sort(), Sort::Errors);
        assert_eq!(b.rows()[0].name, "crashy");
    }
}
