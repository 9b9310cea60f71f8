//! How `top` draws a [`Board`] (issue 33 §1): a header, the table (one row per server, each
//! endpoint with its sources beneath), the detail pane of the selected row with its
//! sparklines, the message line and the keys.
//!
//! At 80 columns the table keeps name, state, restarts, requests/s, errors and p99; from
//! [`WIDE`] columns on it adds era, pid, uptime, clients, p50 and the last exit. Colours only
//! without `NO_COLOR` (<https://no-color.org>); the selection is reverse video either way.
//!
//! Owns: the layout and the formatting of numbers. Reads nothing but the board.

use super::board::{Board, Kind, Role, Row};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Row as TableRow, Sparkline, Table, TableState, Wrap};
use ratatui::Frame;
use serde_json::Value;

/// Columns from which the table shows every column.
pub const WIDE: u16 = 120;

/// Colours on or off.
#[derive(Debug, Clone, Copy)]
pub struct Look {
    /// False under `NO_COLOR`.
    pub color: bool,
}

impl Look {
    fn fg(self, c: Color) -> Style {
        if self.color {
            Style::default().fg(c)
        } else {
            Style::default()
        }
    }

    fn state(self, state: &str) -> Style {
        match state {
            "ready" => self.fg(Color::Green),
            "failed" | "backoff" | "auth_required" | "removed" | "unknown" => {
                self.fg(Color::Red).add_modifier(Modifier::BOLD)
            }
            "starting" | "stopping" => self.fg(Color::Yellow),
            _ => Style::default(),
        }
    }
}

fn text<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    path.iter()
        .try_fold(v, |v, k| v.get(*k))
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn number(v: &Value, path: &[&str]) -> Option<f64> {
    path.iter()
        .try_fold(v, |v, k| v.get(*k))
        .and_then(Value::as_f64)
}

/// `12.3`, `1.2k`; `-` without a value.
pub fn rate(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(r) if r >= 1000.0 => format!("{:.1}k", r / 1000.0),
        Some(r) => format!("{r:.1}"),
    }
}

/// A ratio as a percentage: `0.0%`, `12.5%`; `-` without one.
pub fn percent(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        // 99.9%, 99.95%: the digits an objective is written with.
        Some(r) if (0.99..1.0).contains(&r) => {
            let t = format!("{:.2}", r * 100.0);
            format!("{}%", t.trim_end_matches('0').trim_end_matches('.'))
        }
        Some(r) => format!("{:.1}%", r * 100.0),
    }
}

/// Milliseconds: `0.8ms`, `12ms`, `1.5s`; `-` without.
pub fn millis(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(ms) if ms < 10.0 => format!("{ms:.1}ms"),
        Some(ms) if ms < 1000.0 => format!("{ms:.0}ms"),
        Some(ms) => format!("{:.1}s", ms / 1000.0),
    }
}

/// Seconds as `42s`, `5m`, `3h`, `2d`; `-` without.
pub fn age(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(s) if s < 60.0 => format!("{s:.0}s"),
        Some(s) if s < 3600.0 => format!("{:.0}m", s / 60.0),
        Some(s) if s < 86400.0 => format!("{:.0}h", s / 3600.0),
        Some(s) => format!("{:.0}d", s / 86400.0),
    }
}

/// The last exit, with the last stderr line when the view has one: `exited(1): boom`.
fn last_exit(s: &Value) -> String {
    let reason = text(s, &["last_exit", "reason"]);
    let line = text(s, &["stderr_tail"])
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    match (reason.is_empty(), line.is_empty()) {
        (true, _) => String::new(),
        (false, true) => reason.to_string(),
        (false, false) => format!("{reason}: {line}"),
    }
}

fn cells(row: &Row, wide: bool, look: Look) -> TableRow<'static> {
    let s = &row.status;
    let name = match row.kind {
        Kind::Server => row.name.clone(),
        Kind::Endpoint => format!("▸ {}", row.name),
        Kind::Source => format!("  └ {}", row.name),
    };
    if row.kind == Kind::Endpoint {
        let n = s
            .get("servers")
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
        return TableRow::new(vec![
            Span::raw(format!("{name} ({n})")),
            Span::raw("endpoint"),
        ]);
    }
    let state = text(s, &["state"]).to_string();
    let t = |k: &str| number(s, &["traffic", k]);
    let mut c = vec![
        Span::raw(name),
        Span::styled(state.clone(), look.state(&state)),
        Span::raw(number(s, &["restarts"]).map_or("-".into(), |r| format!("{r:.0}"))),
        Span::raw(rate(t("requests_per_s"))),
        Span::raw(percent(t("error_rate"))),
        Span::raw(millis(t("p99_ms"))),
    ];
    if wide {
        c.extend([
            Span::raw(text(s, &["era"]).to_string()),
            Span::raw(number(s, &["pid"]).map_or("-".into(), |p| format!("{p:.0}"))),
            Span::raw(age(number(s, &["uptime_s"]))),
            Span::raw(number(s, &["clients"]).map_or("-".into(), |p| format!("{p:.0}"))),
            Span::raw(millis(t("p50_ms"))),
            Span::raw(last_exit(s)),
        ]);
    }
    TableRow::new(c)
}

/// The last `width` per-minute counts of `key` as sparkline data (the newest at the right).
fn spark(s: &Value, key: &str, width: u16) -> Vec<u64> {
    let all: Vec<u64> = s
        .get("traffic")
        .and_then(|t| t.get(key))
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default();
    let skip = all.len().saturating_sub(usize::from(width));
    all.into_iter().skip(skip).collect()
}

/// The detail pane's lines for a server row.
fn detail(row: &Row, role: Role, look: Look) -> Vec<Line<'static>> {
    let s = &row.status;
    if row.kind == Kind::Endpoint {
        let mut out = vec![Line::from(format!("endpoint {} · sources:", row.name))];
        for src in s
            .get("servers")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let st = text(src, &["state"]).to_string();
            out.push(Line::from(vec![
                Span::raw(format!("  {} ", text(src, &["name"]))),
                Span::styled(st.clone(), look.state(&st)),
            ]));
        }
        return out;
    }
    let t = |k: &str| number(s, &["traffic", k]);
    let state = text(s, &["state"]).to_string();
    let mut head = vec![
        Span::styled(
            row.name.clone(),
            Style::default().add_modifier(Modifier::BOLD),
        ),
        Span::raw(" · "),
        Span::styled(state.clone(), look.state(&state)),
    ];
    let era = text(s, &["era"]);
    if !era.is_empty() {
        head.push(Span::raw(format!(" · era {era}")));
    }
    if let Some(pid) = number(s, &["pid"]) {
        head.push(Span::raw(format!(" · pid {pid:.0}")));
    }
    let url = text(s, &["remote", "url"]);
    if !url.is_empty() {
        head.push(Span::raw(format!(" · {url}")));
    }
    head.push(Span::raw(format!(
        " · up {} · clients {} · restarts {}",
        age(number(s, &["uptime_s"])),
        number(s, &["clients"]).unwrap_or(0.0),
        number(s, &["restarts"]).unwrap_or(0.0),
    )));
    if let Some(ms) = number(s, &["retry_in_ms"]) {
        head.push(Span::raw(format!(" · retry in {}", millis(Some(ms)))));
    }
    let mut out = vec![Line::from(head)];
    out.push(Line::from(format!(
        "availability {} (objective {}) · burn 1h {} · 6h {} · p50 {} · p99 {} · {} req/s",
        percent(t("availability")),
        percent(t("objective")),
        t("burn_1h").map_or("-".into(), |b| format!("{b:.1}")),
        t("burn_6h").map_or("-".into(), |b| format!("{b:.1}")),
        millis(t("p50_ms")),
        millis(t("p99_ms")),
        rate(t("requests_per_s")),
    )));
    let exit = last_exit(s);
    if !exit.is_empty() {
        out.push(Line::from(format!(
            "last exit {exit} at {}",
            text(s, &["last_exit", "at"])
        )));
    }
    for f in s
        .get("traffic")
        .and_then(|t| t.get("recent_failures"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .rev()
        .take(3)
    {
        out.push(Line::from(format!(
            "failed {} {} {} {}",
            text(f, &["at"]),
            text(f, &["request_id"]),
            text(f, &["method"]),
            text(f, &["outcome"]),
        )));
    }
    if let Some(l) = s.get("limits").filter(|l| !l.is_null()) {
        out.push(Line::from(format!("limits {}", compact(l))));
    }
    if role == Role::Operator {
        let tail: Vec<&str> = text(s, &["stderr_tail"])
            .lines()
            .filter(|l| !l.trim().is_empty())
            .collect();
        for l in tail.iter().rev().take(4).rev() {
            out.push(Line::from(Span::styled(
                format!("stderr │ {l}"),
                look.fg(Color::DarkGray),
            )));
        }
    }
    out
}

/// A small JSON object as `key value` pairs on one line.
fn compact(v: &Value) -> String {
    match v.as_object() {
        Some(o) => o
            .iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| match v {
                Value::String(s) => format!("{k} {s}"),
                Value::Object(_) => format!("{k} {{{}}}", compact(v)),
                other => format!("{k} {other}"),
            })
            .collect::<Vec<_>>()
            .join(" · "),
        None => v.to_string(),
    }
}

/// Draws the whole screen.
pub fn draw(f: &mut Frame<'_>, board: &Board, look: Look) {
    let area = f.area();
    let detail_height = if area.height >= 20 { 10 } else { 6 };
    let [head, table, pane, message, keys] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(3),
        Constraint::Length(detail_height),
        Constraint::Length(1),
        Constraint::Length(1),
    ])
    .areas(area);
    let (servers, endpoints) = board.counts();
    let (filter, typing) = board.filter();
    let role = match board.role() {
        Role::Operator => "operator",
        Role::Viewer => "viewer (read-only)",
    };
    let plural = |n: usize, one: &str| format!("{n} {one}{}", if n == 1 { "" } else { "s" });
    let mut h = format!(
        "mcp-supervisor top · {} · {} · {role} · sort {}",
        plural(servers, "server"),
        plural(endpoints, "endpoint"),
        board.sort().name()
    );
    if typing || !filter.is_empty() {
        h.push_str(&format!(
            " · filter /{filter}{}",
            if typing { "_" } else { "" }
        ));
    }
    f.render_widget(
        Paragraph::new(h).style(Style::default().add_modifier(Modifier::BOLD)),
        head,
    );
    let wide = area.width >= WIDE;
    let rows = board.rows();
    let mut header = vec!["NAME", "STATE", "RESTARTS", "REQ/S", "ERR", "P99"];
    let mut widths = vec![
        Constraint::Min(16),
        Constraint::Length(13),
        Constraint::Length(8),
        Constraint::Length(7),
        Constraint::Length(7),
        Constraint::Length(7),
    ];
    if wide {
        header.extend(["ERA", "PID", "UP", "CLIENTS", "P50", "LAST EXIT"]);
        widths.extend([
            Constraint::Length(10),
            Constraint::Length(7),
            Constraint::Length(5),
            Constraint::Length(7),
            Constraint::Length(7),
            Constraint::Min(20),
        ]);
        if let Some(first) = widths.first_mut() {
            *first = Constraint::Length(20);
        }
    }
    let t = Table::new(rows.iter().map(|r| cells(r, wide, look)), widths)
        .header(TableRow::new(header).style(Style::default().add_modifier(Modifier::BOLD)))
        .row_highlight_style(Style::default().add_modifier(Modifier::REVERSED));
    let mut state = TableState::default().with_selected(Some(board.selected()));
    f.render_stateful_widget(t, table, &mut state);
    if let Some(row) = board.selected_row() {
        draw_detail(f, pane, &row, board.role(), look);
    }
    let msg = board
        .ended()
        .map(|e| format!("stream ended: {e} (q quits)"))
        .or_else(|| board.message().map(str::to_string))
        .unwrap_or_default();
    f.render_widget(Paragraph::new(msg), message);
    let k = match board.role() {
        Role::Operator => "↑↓ select  s start  x stop  r restart  / filter  o sort  q quit",
        Role::Viewer => "↑↓ select  / filter  o sort  q quit",
    };
    f.render_widget(Paragraph::new(k).style(look.fg(Color::Cyan)), keys);
}

fn draw_detail(f: &mut Frame<'_>, area: Rect, row: &Row, role: Role, look: Look) {
    let lines = detail(row, role, look);
    if row.kind == Kind::Endpoint || area.height < 4 {
        f.render_widget(Paragraph::new(lines).wrap(Wrap { trim: false }), area);
        return;
    }
    let [sparks, text] = Layout::vertical([Constraint::Length(2), Constraint::Min(1)]).areas(area);
    let [req_label, req, err_label, err] = Layout::horizontal([
        Constraint::Length(9),
        Constraint::Percentage(50),
        Constraint::Length(8),
        Constraint::Min(1),
    ])
    .areas(sparks);
    f.render_widget(Paragraph::new("req/min"), req_label);
    f.render_widget(
        Sparkline::default()
            .data(spark(&row.status, "requests_per_min", req.width))
            .style(look.fg(Color::Green)),
        req,
    );
    f.render_widget(Paragraph::new(" err/min"), err_label);
    f.render_widget(
        Sparkline::default()
            .data(spark(&row.status, "errors_per_min", err.width))
            .style(look.fg(Color::Red)),
        err,
    );
    f.render_widget(Paragraph::new(lines).wrap(Wrap { trim: false }), text);
}

#[cfg(test)]
mod tests {
    use super::{age, draw, millis, percent, rate, Look};
    use crate::top::board::Board;
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;
    use serde_json::json;

    fn screen(board: &Board, w: u16, h: u16) -> String {
        let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
        t.draw(|f| draw(f, board, Look { color: false })).unwrap();
        let buf = t.backend().buffer().clone();
        let mut out = String::new();
        for y in 0..h {
            for x in 0..w {
                out.push_str(buf[(x, y)].symbol());
            }
            out.push('\n');
        }
        out
    }

    #[test]
    fn at_80x24_the_six_columns_and_the_detail_show() {
        let mut b = Board::default();
        b.apply(&json!({"kind": "snapshot", "role": "operator", "servers": [
            {"name": "crashy", "state": "backoff", "restarts": 3, "last_exit": {"reason": "exited(1)", "at": "t"},
             "stderr_tail": "boom\n", "traffic": {"requests_per_s": 1.5, "error_rate": 0.25, "p99_ms": 12.0,
             "objective": 0.999, "requests_per_min": [1, 2, 3], "errors_per_min": [0, 1, 0],
             "recent_failures": [{"at": "t", "request_id": "r-00000000abcd", "method": "tools/call", "outcome": "timeout"}]}},
        ], "endpoints": [], "removed": []}));
        let s = screen(&b, 80, 24);
        for want in [
            "NAME",
            "STATE",
            "RESTARTS",
            "REQ/S",
            "ERR",
            "P99",
            "crashy",
            "backoff",
            "25.0%",
            "12ms",
            "exited(1): boom",
            "r-00000000abcd",
            "stderr │ boom",
            "r restart",
        ] {
            assert!(s.contains(want), "{want} missing:\n{s}");
        }
        assert!(!s.contains("CLIENTS"), "narrow view has no CLIENTS:\n{s}");
        assert!(screen(&b, 140, 30).contains("CLIENTS"));
        // A tiny terminal does not panic.
        let _ = screen(&b, 10, 3);
    }

    #[test]
    fn numbers_read_well() {
        assert_eq!(rate(Some(1234.0)), "1.2k");
        assert_eq!(rate(None), "-");
        assert_eq!(percent(Some(0.9991)), "99.91%");
        assert_eq!(percent(Some(0.999)), "99.9%");
        assert_eq!(percent(Some(1.0)), "100.0%");
        assert_eq!(percent(Some(0.5)), "50.0%");
        assert_eq!(millis(Some(0.8)), "0.8ms");
        assert_eq!(millis(Some(1500.0)), "1.5s");
        assert_eq!(age(Some(7200.0)), "2h");
    }
}
