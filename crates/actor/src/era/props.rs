use super::*;
use proptest::prelude::*;

/// A JSON document as written, so duplicate keys, escapes and odd whitespace can be made.
#[derive(Debug, Clone)]
enum J {
    Null,
    Bool(bool),
    Int(i64),
    Big(u64),
    Float(f64),
    Str(String),
    Arr(Vec<J>),
    Obj(Vec<(String, J)>),
}

/// Member names the translations look at, mixed with arbitrary ones.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(vec![
            "_meta",
            META_VERSION,
            META_CAPABILITIES,
            META_CLIENT_INFO,
            META_LOG_LEVEL,
            META_SERVER_INFO,
            "resultType",
            "ttlMs",
            "cacheScope",
            "tools",
            "content",
            "protocolVersion",
            "capabilities",
            "serverInfo",
            "instructions",
            "supportedVersions",
            "code",
            "message",
            "progressToken",
        ])
        .prop_map(str::to_string),
        1 => "\\PC{0,6}",
    ]
}

fn json() -> impl Strategy<Value = J> {
    let leaf = prop_oneof![
        Just(J::Null),
        any::<bool>().prop_map(J::Bool),
        any::<i64>().prop_map(J::Int),
        any::<u64>().prop_map(J::Big),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(J::Float),
        prop_oneof![
            Just("complete".to_string()),
            Just(MODERN_VERSION.to_string()),
            ".{0,8}"
        ]
        .prop_map(J::Str),
    ];
    leaf.prop_recursive(6, 96, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(J::Arr),
            prop::collection::vec((key(), inner), 0..6).prop_map(J::Obj),
        ]
    })
}

/// Renders `j`; `ws` picks the whitespace between tokens, `esc` whether keys are written
/// with `\u` escapes.
fn render(j: &J, ws: &[&str], esc: bool, out: &mut String, n: &mut usize) {
    fn pad(out: &mut String, ws: &[&str], n: &mut usize) {
        if !ws.is_empty() {
            out.push_str(ws[*n % ws.len()]);
            *n += 1;
        }
    }
    pad(out, ws, n);
    match j {
        J::Null => out.push_str("null"),
        J::Bool(b) => out.push_str(&b.to_string()),
        J::Int(i) => out.push_str(&i.to_string()),
        J::Big(u) => out.push_str(&u.to_string()),
        J::Float(f) => out.push_str(&serde_json::to_string(f).unwrap()),
        J::Str(s) => out.push_str(&serde_json::to_string(s).unwrap()),
        J::Arr(a) => {
            out.push('[');
            for (i, v) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                render(v, ws, esc, out, n);
            }
            pad(out, ws, n);
            out.push(']');
        }
        J::Obj(o) => {
            out.push('{');
            for (i, (k, v)) in o.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                pad(out, ws, n);
                if esc {
                    out.push('"');
                    for u in k.encode_utf16() {
                        out.push_str(&format!("\\u{u:04x}"));
                    }
                    out.push('"');
                } else {
                    out.push_str(&serde_json::to_string(k).unwrap());
                }
                pad(out, ws, n);
                out.push(':');
                render(v, ws, esc, out, n);
            }
            pad(out, ws, n);
            out.push('}');
        }
    }
    pad(out, ws, n);
}

/// Arbitrary JSON text: any shape, duplicates, escaped keys, any JSON whitespace.
fn text() -> impl Strategy<Value = String> {
    let ws = prop::collection::vec(
        prop::sample::select(vec!["", "", " ", "\n", "\t", "\r\n", "  \t "]),
        0..4,
    );
    (json(), ws, prop::bool::weighted(0.1)).prop_map(|(j, ws, esc)| {
        let mut out = String::new();
        render(&j, &ws, esc, &mut out, &mut 0);
        out
    })
}

/// Params shaped like a modern request, with extra members anywhere.
fn modern_params() -> impl Strategy<Value = String> {
    (
        prop::collection::vec((key(), json()), 0..4),
        prop::collection::vec((key(), json()), 0..4),
        prop::collection::vec(prop::sample::select(ENVELOPE_KEYS.to_vec()), 0..5),
    )
        .prop_map(|(outer, meta, env)| {
            let mut m: Vec<(String, J)> = meta;
            for k in env {
                m.push((k.to_string(), J::Str(MODERN_VERSION.into())));
            }
            let mut o = outer;
            o.push(("_meta".into(), J::Obj(m)));
            let mut out = String::new();
            render(&J::Obj(o), &[], false, &mut out, &mut 0);
            out
        })
}

fn parses(s: &str) -> bool {
    serde_json::from_str::<serde::de::IgnoredAny>(s).is_ok()
}

fn methods() -> Vec<&'static str> {
    let mut m: Vec<&str> = LISTS.iter().map(|(l, _, _)| *l).collect();
    m.extend(CACHEABLE);
    m.extend(RESULT_SHAPES.iter().map(|(m, _)| *m));
    m.extend(["tools/call", "vendor/x", ""]);
    m
}

fn check_all(text: &str) {
    let Ok(r) = RawValue::from_string(text.to_string()) else {
        return;
    };
    let before: Value = serde_json::from_str(text).unwrap();
    for m in methods() {
        let out = modernize_result(&r, m);
        assert!(parses(out.get()), "{m}: {}", out.get());
        let after: Value = serde_json::from_str(out.get()).unwrap();
        match (&before, &after) {
            (Value::Object(b), Value::Object(a)) => {
                // Every member of the child's survives (last-wins), and the marks are there.
                for (k, v) in b {
                    assert_eq!(a.get(k), Some(v), "{m}: {k}");
                }
                assert!(a.contains_key("resultType"));
                if CACHEABLE.contains(&m) {
                    assert!(a.contains_key("ttlMs") && a.contains_key("cacheScope"));
                }
            }
            _ => assert_eq!(out.get(), r.get(), "{m}: non-objects pass unchanged"),
        }
        let verdict = check_result_shape(m, &r);
        if RESULT_SHAPES.iter().any(|(k, _)| *k == m) && !before.is_object() {
            assert!(verdict.is_err(), "{m}: {text}");
        }
    }
    let e = check_error_shape(&r);
    let oracle = before.get("code").is_some_and(Value::is_i64)
        && before.get("message").is_some_and(Value::is_string);
    assert_eq!(e.is_ok(), oracle, "{text}: {e:?}");

    let stripped = strip_envelope(&r);
    assert!(parses(stripped.get()));
    let added = add_envelope(Some(&r), &supervisor_envelope());
    let v: Value = serde_json::from_str(added.get()).unwrap();
    for (k, want) in supervisor_envelope() {
        assert_eq!(v["_meta"].get(&k), Some(&want), "{}", added.get());
    }
    let _ = envelope_version(Some(&r));
    for k in ENVELOPE_KEYS {
        let _ = envelope_field(Some(&r), k);
    }

    if let Some(h) = Handshake::from_result(before.clone()) {
        for v in ["2025-06-18", MODERN_VERSION, "", "junk"] {
            assert!(parses(&h.initialize_result(v).to_string()));
        }
        assert!(parses(&h.discover_result().to_string()));
        let _ = (h.confirm_method(), h.has("tools"));
    }
    let d = Handshake::from_discover(before);
    assert!(parses(&d.initialize_result("2025-03-26").to_string()));
    assert!(parses(&d.discover_result().to_string()));
    let _ = (d.confirm_method(), d.has("tools"));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_json_in_valid_json_out(text in text()) {
        check_all(&text);
    }

    #[test]
    fn modern_params_lose_exactly_their_envelope(text in modern_params()) {
        check_all(&text);
        let r = RawValue::from_string(text.clone()).unwrap();
        let v: Value = serde_json::from_str(strip_envelope(&r).get()).unwrap();
        let before: Value = serde_json::from_str(&text).unwrap();
        if let Some(meta) = v.get("_meta") {
            for k in ENVELOPE_KEYS {
                prop_assert!(meta.get(k).is_none(), "{}", text);
            }
        }
        for (k, val) in before.as_object().unwrap() {
            if k != "_meta" {
                prop_assert_eq!(v.get(k), Some(val));
            }
        }
    }
}
