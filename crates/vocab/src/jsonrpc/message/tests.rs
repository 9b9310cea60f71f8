//! Unit and property tests of the envelope parser and encoders.

use super::*;

#[test]
fn classifies_messages() {
    let r = parse_one(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#).unwrap();
    assert_eq!(r.kind, Kind::Request);
    let n = parse_one(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).unwrap();
    assert_eq!(n.kind, Kind::Notification);
    let s = parse_one(br#"{"jsonrpc":"2.0","id":"a","result":{}}"#).unwrap();
    assert_eq!(s.kind, Kind::Response);
    let e =
        parse_one(br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x"}}"#).unwrap();
    assert_eq!(e.error_code(), Some(-32700));
    assert_eq!(e.id.unwrap().get(), "null");
}

#[test]
fn json_followed_by_junk_is_rejected_whole_case_k01() {
    let e = parse_one(br#"{"jsonrpc":"2.0","id":1,"result":{}}npm notice"#).unwrap_err();
    assert_eq!(e.code(), code::PARSE_ERROR);
}

#[test]
fn valid_json_of_the_wrong_shape_is_invalid_request_not_parse_error() {
    for bad in [
        &b"42"[..],
        br#"{"jsonrpc":"2.0","method":1}"#,
        br#"{"foo":"bar"}"#,
    ] {
        assert_eq!(parse_one(bad).unwrap_err().code(), code::INVALID_REQUEST);
    }
    assert_eq!(
        parse_one(b"not json").unwrap_err().code(),
        code::PARSE_ERROR
    );
}

#[test]
fn rejects_wrong_shapes() {
    for bad in [
        &br#"{"id":1,"method":"x"}"#[..],
        br#"{"jsonrpc":"1.0","id":1,"method":"x"}"#,
        br#"{"jsonrpc":"2.0","id":1}"#,
        br#"{"jsonrpc":"2.0","id":{},"method":"x"}"#,
        br#"{"jsonrpc":"2.0","method":"x","result":1}"#,
        br#"7"#,
    ] {
        assert!(parse_one(bad).is_err(), "{}", String::from_utf8_lossy(bad));
    }
}

#[test]
fn batches_are_split() {
    let v = parse_line(&Bytes::from_static(
        br#"[{"jsonrpc":"2.0","method":"a"},{"jsonrpc":"2.0","id":2,"method":"b"}]"#,
    ))
    .unwrap();
    assert_eq!(v.len(), 2);
    assert_eq!(v[1].as_ref().unwrap().method(), "b");
}

#[test]
fn ids_keep_exact_type_and_value() {
    for id in ["0", "\"0\"", "-5", "1.5", "\"\"", "18446744073709551616"] {
        let line = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"m"}}"#);
        let m = parse_one(line.as_bytes()).unwrap();
        let back = Out::result(m.id.as_deref().unwrap(), &raw(&Value::Null)).encode();
        assert!(String::from_utf8_lossy(&back).contains(&format!("\"id\":{id}")));
    }
}

#[test]
fn encode_is_one_compact_line() {
    let params = RawValue::from_string("{\"a\": [1, 2]}".into()).unwrap();
    let b = Out::request(Some(&raw_u64(7)), "tools/call", Some(&params)).encode();
    assert_eq!(
        &b[..],
        &b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{\"a\":[1,2]}}\n"[..]
    );
}

#[test]
fn spliced_and_direct_lines_are_the_bytes_out_encode_writes() {
    for params in [None, Some("{\"a\": [1, 2]}"), Some("{}")] {
        let p = params.map(|p| RawValue::from_string(p.into()).unwrap());
        for method in ["tools/call", "x\"y", "notifications/cancelled"] {
            assert_eq!(
                request_line(7, method, p.as_deref()),
                Out::request(Some(&raw_u64(7)), method, p.as_deref()).encode()
            );
        }
    }
    for (line, id) in [
        (
            &br#"{"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"a b"}]}}"#[..],
            "\"x\"",
        ),
        (
            br#"{"result":{"k":[1,2]},"id":"q","jsonrpc":"2.0"}"#,
            "18446744073709551616",
        ),
        (
            br#"{"jsonrpc":"2.0","id":1,"result": { "spaced" : true }}"#,
            "1",
        ),
    ] {
        let m = parse_shared(&Bytes::copy_from_slice(line)).unwrap();
        let r = m.result.unwrap();
        let id = RawValue::from_string(id.into()).unwrap();
        let want = Out::result(&id, &r.raw()).encode();
        assert_eq!(result_line(&id, &r).to_bytes(), want);
    }
    // The common case shares the child's bytes, spaces in strings included.
    let line = Bytes::from_static(br#"{"jsonrpc":"2.0","id":3,"result":{"k":"v w\" x"}}"#);
    let r = parse_shared(&line).unwrap().result.unwrap();
    let at = memchr::memmem::find(&line, b"\"result\":").unwrap() + 9;
    assert!(std::ptr::eq(r.as_bytes().as_ptr(), line[at..].as_ptr()));
    assert_eq!(method_name("tools/call"), Cow::Borrowed("tools/call"));
    assert!(matches!(method_name("my/own"), Cow::Owned(_)));
}

#[test]
fn compact_strips_whitespace_outside_strings_only_case_k03() {
    let r = RawValue::from_string("{ \"a b\" :\r[1,\t\"x\\\" y\" ] }".into()).unwrap();
    assert_eq!(compact(&r).get(), "{\"a b\":[1,\"x\\\" y\"]}");
    let c = RawValue::from_string("{\"k\":\"v w\"}".into()).unwrap();
    assert!(matches!(compact(&c), std::borrow::Cow::Borrowed(_)));
    // No whitespace byte at all: the fast path borrows.
    let f = RawValue::from_string("{\"data\":\"QUJD+/==\",\"n\":[1,2]}".into()).unwrap();
    assert!(matches!(compact(&f), std::borrow::Cow::Borrowed(_)));
    // Each whitespace byte alone sends it to the state machine.
    for ws in [" ", "\t", "\r", "\n"] {
        let r = RawValue::from_string(format!("{{\"a\":{ws}1}}")).unwrap();
        assert_eq!(compact(&r).get(), "{\"a\":1}", "{ws:?}");
    }
    // Whitespace inside strings only, escapes included: borrowed.
    let s = RawValue::from_string(r#"{"t":"a b\"c d\\","u":["\t x"]}"#.into()).unwrap();
    assert!(matches!(compact(&s), std::borrow::Cow::Borrowed(_)));
    let s = RawValue::from_string(r#"{"t":"a\\" ,"u":1}"#.into()).unwrap();
    assert_eq!(compact(&s).get(), r#"{"t":"a\\","u":1}"#);
}

#[test]
fn progress_token_swap_keeps_other_members() {
    let p = RawValue::from_string(
        r#"{"name":"t","arguments":{"x":"y"},"_meta":{"progressToken":"tok","k":1}}"#.into(),
    )
    .unwrap();
    let (np, orig) = swap_progress_token(&p, || raw_u64(42)).unwrap();
    assert_eq!(orig.get(), "\"tok\"");
    assert_eq!(
        np.get(),
        r#"{"name":"t","arguments":{"x":"y"},"_meta":{"progressToken":42,"k":1}}"#
    );
    let none = RawValue::from_string(r#"{"name":"t"}"#.into()).unwrap();
    assert!(swap_progress_token(&none, || raw_u64(1)).is_none());
}

mod props {
    use super::*;
    use proptest::prelude::*;

    fn json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            "[ a\"\\\t\n\r{}:,\\[\\]é]{0,8}".prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 24, 5, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
                proptest::collection::btree_map("[ a\"\\\t]{0,4}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn compact_is_what_serde_json_writes_and_borrows_compact_text_k03(v in json()) {
            let tight = serde_json::to_string(&v).unwrap();
            let pretty = serde_json::to_string_pretty(&v).unwrap();
            let raw = RawValue::from_string(pretty).unwrap();
            let compacted = compact(&raw).get().to_string();
            prop_assert_eq!(compacted, tight.clone());
            let raw = RawValue::from_string(tight.clone()).unwrap();
            prop_assert!(matches!(compact(&raw), std::borrow::Cow::Borrowed(_)), "{}", tight);
        }

        #[test]
        fn parsing_arbitrary_bytes_never_panics(line in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = parse_line(&Bytes::from(line.clone()));
            let _ = parse_one(&line);
        }

        #[test]
        fn parsing_mutated_messages_never_panics(
            flips in proptest::collection::vec((any::<proptest::sample::Index>(), any::<u8>()), 0..4),
            base in prop_oneof![
                Just(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"progressToken":"t"}}}"#),
                Just(r#"[{"jsonrpc":"2.0","id":"a","result":{}},{"jsonrpc":"2.0","method":"n"}]"#),
                Just(r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x"}}"#),
            ],
        ) {
            let mut line = base.as_bytes().to_vec();
            for (at, b) in flips {
                let i = at.index(line.len());
                line[i] = b;
            }
            if let Ok(msgs) = parse_line(&Bytes::from(line.clone())) {
                for m in msgs.into_iter().flatten() {
                    let _ = (m.error_code(), m.params_object());
                    if let Some(p) = &m.params {
                        let _ = swap_progress_token(p, || raw_u64(1));
                    }
                    // Whatever was parsed re-encodes to one line that parses again (a
                    // notification when the id is null: null is no request id).
                    let id = m.id.as_deref().filter(|i| i.get() != "null");
                    let out = Out::request(id, m.method(), m.params.as_deref()).encode();
                    prop_assert_eq!(out.iter().filter(|b| **b == b'\n').count(), 1);
                    prop_assert!(parse_one(&out[..out.len() - 1]).is_ok(), "{:?}", out);
                }
            }
        }

        #[test]
        fn hand_written_encoding_matches_serde_json(s in "\\PC*|[\\x00-\\x20\"\\\\\u{7f}\u{2028}é]{0,20}", k in "[a-z\"\\\\\\n]{0,8}") {
            let mut v = Vec::new();
            push_json_str(&mut v, &s);
            prop_assert_eq!(String::from_utf8(v).unwrap(), serde_json::to_string(&s).unwrap());
            let obj = RawObject(vec![(k, raw(&Value::String(s))), ("n".into(), raw_u64(3))]);
            // The serde `Serialize` impl is what `to_raw` used before it was hand-written.
            let raw_text = obj.to_raw();
            prop_assert_eq!(raw_text.get(), serde_json::to_string(&obj).unwrap());
        }
    }
}
