//! Secrets out of what a url server says back (issue 47 §5, N21): a server that quotes the
//! request's `Authorization` header in its JSON-RPC error would otherwise hand the credential
//! to every client of the socket. Replaced by [`REDACTED`]:
//! - configured header values of at least [`MIN_HEADER`] bytes;
//! - the credential after `Bearer ` or `Basic ` in any configured value, Basic's decoded
//!   `user:password` and its password (each of at least [`MIN_PART`] bytes);
//! - the sign-in's access and refresh tokens and client secrets, current and recent
//!   ([`crate::auth::SignIn::secrets`]).
//!
//! Where: every JSON-RPC error a url server sends (its `message` and every string in `data`,
//! keys too, at any depth: the whole error object), and the outage texts of the session (the
//! `stderr_tail` of outage records, `status`'s `last_error`). Results, notifications and the
//! server's requests are never rewritten (a server that puts a secret in a tool result is
//! trusted with it, as with everything it returns); the docs say so.
//!
//! Cost: only error responses are looked at. First one substring search per secret over the
//! error's raw bytes, for the secret as written and as JSON escapes it (`\"`, `\\`, control
//! characters); an error that uses the escapes that could spell a secret differently (`\u`,
//! `\/`) is looked at too. Only then is it parsed, rewritten and encoded again.

use serde_json::value::RawValue;
use serde_json::Value;
use std::borrow::Cow;

/// What a secret is replaced with.
pub const REDACTED: &str = "<redacted>";
/// The shortest configured header value redacted, in bytes (issue 47 §5): shorter values
/// (`X-Tenant: acme`) are not secrets, and replacing them everywhere would garble errors.
pub const MIN_HEADER: usize = 8;
/// The shortest part of a credential redacted (after the scheme, Basic's password), tokens
/// and client secrets, in bytes.
pub const MIN_PART: usize = 4;

/// The strings an error must not quote. Its `Debug` shows how many, never one.
#[derive(Clone, Default)]
pub struct Secrets {
    /// Each secret once, longest first.
    list: Vec<String>,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secrets({} kept)", self.list.len())
    }
}

impl Secrets {
    /// The secrets of configured header values (see the module).
    pub fn of_headers<'a>(values: impl IntoIterator<Item = &'a str>) -> Secrets {
        let mut s = Secrets::default();
        for v in values {
            s.add_header(v);
        }
        s
    }

    /// One configured header value: itself, and its credential's forms.
    pub fn add_header(&mut self, value: &str) {
        let value = value.trim();
        self.add(value, MIN_HEADER);
        let Some((scheme, cred)) = value.split_once(' ') else {
            return;
        };
        let cred = cred.trim();
        if scheme.eq_ignore_ascii_case("bearer") {
            self.add(cred, MIN_PART);
        } else if scheme.eq_ignore_ascii_case("basic") {
            self.add(cred, MIN_PART);
            use base64::Engine;
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(cred)
                .or_else(|_| base64::engine::general_purpose::STANDARD_NO_PAD.decode(cred));
            if let Ok(text) = decoded.map(String::from_utf8) {
                let Ok(text) = text else { return };
                self.add(&text, MIN_PART);
                if let Some((_, password)) = text.split_once(':') {
                    self.add(password, MIN_PART);
                }
            }
        }
    }

    /// `secret`, when it has at least `min` bytes.
    pub fn add(&mut self, secret: &str, min: usize) {
        if secret.len() < min.max(1) || self.list.iter().any(|s| s == secret) {
            return;
        }
        self.list.push(secret.to_string());
        self.list.sort_by_key(|s| std::cmp::Reverse(s.len()));
    }

    /// These and `more` (tokens and client secrets of at least [`MIN_PART`] bytes).
    pub fn with(&self, more: &[String]) -> Cow<'_, Secrets> {
        if more.is_empty() {
            return Cow::Borrowed(self);
        }
        let mut all = self.clone();
        for m in more {
            all.add(m, MIN_PART);
        }
        Cow::Owned(all)
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Whether the JSON text `raw` may quote a secret: a secret's bytes, as written or as JSON
    /// escapes them, or an escape (`\u`, `\/`) that could spell one otherwise.
    pub fn may_quote(&self, raw: &[u8]) -> bool {
        if self.list.is_empty() {
            return false;
        }
        let find = |needle: &[u8]| memchr::memmem::find(raw, needle).is_some();
        if find(b"\\u") || find(b"\\/") {
            return true;
        }
        self.list.iter().any(|s| {
            find(s.as_bytes()) || {
                let escaped = serde_json::to_string(s).unwrap_or_default();
                let inner = escaped
                    .get(1..escaped.len().saturating_sub(1))
                    .unwrap_or_default();
                inner != s && find(inner.as_bytes())
            }
        })
    }

    /// `text` with every secret in it replaced (overlapping ones as one span); borrowed when
    /// it quotes none.
    pub fn text<'a>(&self, text: &'a str) -> Cow<'a, str> {
        // Byte spans of every occurrence of every secret, merged.
        let mut spans: Vec<(usize, usize)> = Vec::new();
        for s in &self.list {
            let finder = memchr::memmem::Finder::new(s.as_bytes());
            spans.extend(
                finder
                    .find_iter(text.as_bytes())
                    .map(|at| (at, at + s.len())),
            );
        }
        if spans.is_empty() {
            return Cow::Borrowed(text);
        }
        spans.sort_unstable();
        let mut out = String::with_capacity(text.len());
        let mut from = 0;
        let mut i = 0;
        while let Some(&(start, mut end)) = spans.get(i) {
            i += 1;
            while let Some(&(s2, e2)) = spans.get(i) {
                if s2 > end {
                    break;
                }
                end = end.max(e2);
                i += 1;
            }
            // Secrets are whole strings, so spans start and end on character boundaries.
            out.push_str(text.get(from..start).unwrap_or_default());
            out.push_str(REDACTED);
            from = end;
        }
        out.push_str(text.get(from..).unwrap_or_default());
        Cow::Owned(out)
    }

    /// Every string in `v` (object keys too) redacted; whether anything changed.
    fn value(&self, v: &mut Value) -> bool {
        match v {
            Value::String(s) => match self.text(s) {
                Cow::Owned(new) => {
                    *s = new;
                    true
                }
                Cow::Borrowed(_) => false,
            },
            Value::Array(a) => a.iter_mut().fold(false, |c, x| self.value(x) | c),
            Value::Object(o) => {
                let mut changed = false;
                let old = std::mem::take(o);
                for (k, mut x) in old {
                    changed |= self.value(&mut x);
                    let k = match self.text(&k) {
                        Cow::Owned(new) => {
                            changed = true;
                            new
                        }
                        Cow::Borrowed(_) => k,
                    };
                    o.insert(k, x);
                }
                changed
            }
            _ => false,
        }
    }

    /// A JSON-RPC `error` object with every secret in it replaced; `None` when it quotes none
    /// (the common case: nothing is parsed unless [`Secrets::may_quote`] says so).
    pub fn error(&self, raw: &RawValue) -> Option<Box<RawValue>> {
        if !self.may_quote(raw.get().as_bytes()) {
            return None;
        }
        let mut v: Value = serde_json::from_str(raw.get()).ok()?;
        if !self.value(&mut v) {
            return None;
        }
        Some(vocab::jsonrpc::message::raw(&v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;

    fn secrets() -> Secrets {
        let basic = base64::engine::general_purpose::STANDARD.encode("alice:s3cr3t-pw");
        Secrets::of_headers([
            "Bearer tok-ABCDEFGH",
            format!("Basic {basic}").as_str(),
            "key-\"quoted\\-value",
            "short",
        ])
    }

    #[test]
    fn every_form_of_a_credential_is_replaced_and_short_values_are_not() {
        let s = secrets();
        let basic = base64::engine::general_purpose::STANDARD.encode("alice:s3cr3t-pw");
        for (text, want) in [
            (
                "got Authorization: Bearer tok-ABCDEFGH".to_string(),
                "got Authorization: <redacted>",
            ),
            (
                "token tok-ABCDEFGH is bad".into(),
                "token <redacted> is bad",
            ),
            (format!("Basic {basic}"), "<redacted>"),
            ("user alice:s3cr3t-pw".into(), "user <redacted>"),
            ("password s3cr3t-pw".into(), "password <redacted>"),
            ("x key-\"quoted\\-value y".into(), "x <redacted> y"),
            ("a short value stays".into(), "a short value stays"),
            // Overlapping secrets: one span, nothing of either left.
            ("tok-ABCDEFGHtok-ABCDEFGH".into(), "<redacted>"),
        ] {
            assert_eq!(s.text(&text), want, "{text}");
        }
    }

    #[test]
    fn an_error_quoting_a_secret_any_way_json_can_spell_it_is_rewritten() {
        let s = secrets();
        for raw in [
            r#"{"code":-32603,"message":"bad header Bearer tok-ABCDEFGH"}"#,
            r#"{"code":-32603,"message":"x","data":{"headers":["tok-ABCDEFGH"],"tok-ABCDEFGH":1}}"#,
            r#"{"code":-32603,"message":"\u0074ok-ABCDEFGH"}"#,
            r#"{"code":-32603,"message":"key-\"quoted\\-value"}"#,
            r#"{"code":-32603,"message":"x","data":{"deep":[[[{"a":"s3cr3t-pw"}]]]}}"#,
        ] {
            let raw = RawValue::from_string(raw.to_string()).unwrap();
            let out = s
                .error(&raw)
                .unwrap_or_else(|| panic!("{raw} not rewritten"));
            let text = out.get();
            assert!(text.contains(REDACTED), "{text}");
            let v: Value = serde_json::from_str(text).unwrap();
            let flat = v.to_string();
            for secret in ["tok-ABCDEFGH", "s3cr3t-pw", "quoted"] {
                assert!(!flat.contains(secret), "{secret} in {flat}");
            }
            assert_eq!(v["code"], -32603);
        }
        // Nothing quoted: not even parsed.
        let plain = RawValue::from_string(r#"{"code":-32601,"message":"Method not found"}"#.into())
            .unwrap();
        assert!(!s.may_quote(plain.get().as_bytes()));
        assert!(s.error(&plain).is_none());
        assert!(Secrets::default().error(&plain).is_none());
    }

    #[test]
    fn tokens_join_the_configured_secrets_and_debug_shows_none() {
        let s = Secrets::of_headers(["X-Api-Key-0123456789"]);
        let more = vec!["access-token-xyz".to_string(), "ab".to_string()];
        let all = s.with(&more);
        assert_eq!(all.text("access-token-xyz ab"), "<redacted> ab");
        assert_eq!(format!("{:?}", all), "Secrets(2 kept)");
    }
}
