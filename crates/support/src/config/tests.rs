use super::*;

fn bad(text: &str) -> ConfigError {
    parse(Path::new("s.toml"), text).unwrap_err()
}

#[test]
fn minimal_server_gets_documented_defaults() {
    let c = parse(Path::new("/etc/s.toml"), "[servers.a]\ncommand = \"x\"\n").unwrap();
    let a = &c.servers["a"];
    assert_eq!(a.start_timeout, Duration::from_secs(60));
    assert_eq!(a.request_timeout, Duration::from_secs(120));
    assert_eq!(a.probe_interval, Duration::from_secs(30));
    assert_eq!(a.probe_timeout, Duration::from_secs(10));
    assert_eq!(a.probe_failures, 3);
    assert_eq!(a.backoff_initial, Duration::from_secs(1));
    assert_eq!(a.backoff_max, Duration::from_secs(60));
    assert_eq!(a.stop_grace, Duration::from_secs(2));
    assert_eq!(a.kill_timeout, Duration::from_secs(5));
    assert_eq!(a.restart, RestartPolicy::Always);
    // Every default the table gives a number is what a server without the key gets.
    for (key, got) in [
        (keys::START_TIMEOUT, a.start_timeout),
        (keys::REQUEST_TIMEOUT, a.request_timeout),
        (keys::PROBE_INTERVAL, a.probe_interval),
        (keys::PROBE_TIMEOUT, a.probe_timeout),
        (keys::BACKOFF_INITIAL, a.backoff_initial),
        (keys::BACKOFF_MAX, a.backoff_max),
        (keys::BACKOFF_RESET_AFTER, a.backoff_reset_after),
        (keys::STOP_GRACE, a.stop_grace),
        (keys::KILL_TIMEOUT, a.kill_timeout),
        (keys::QUEUE_WAIT, a.queue_wait),
        (keys::CLIENT_STALL_TIMEOUT, a.client_stall_timeout),
        (keys::FIRST_MESSAGE_TIMEOUT, a.first_message_timeout),
        (keys::ERA_PROBE_TIMEOUT, a.era_probe_timeout),
        (keys::HTTP_SESSION_IDLE, c.supervisor.http.session_idle),
    ] {
        assert_eq!(key.default_duration(), Some(got), "{}", key.name);
    }
    for (key, got) in [
        (keys::PROBE_FAILURES, u64::from(a.probe_failures)),
        (keys::MAX_MESSAGE_SIZE, a.max_message_size as u64),
        (keys::MAX_MESSAGE_DEPTH, a.max_message_depth as u64),
        (keys::QUEUE_LIMIT, a.queue_limit as u64),
        (keys::MAX_SUBSCRIPTIONS, a.max_subscriptions as u64),
        (keys::MAX_INFLIGHT, a.max_inflight as u64),
        (keys::CLIENT_QUEUE, a.client_queue as u64),
        (keys::MAX_CLIENTS, c.supervisor.max_clients as u64),
        (keys::CLIENT_MEMORY, c.supervisor.client_memory as u64),
        (
            keys::HTTP_MAX_SESSIONS,
            c.supervisor.http.max_sessions as u64,
        ),
        (
            keys::HTTP_MAX_REQUESTS,
            c.supervisor.http.max_requests as u64,
        ),
    ] {
        assert_eq!(key.default_number(), Some(got), "{}", key.name);
    }
    assert_eq!(
        (a.client_max_inflight, a.client_idle_timeout, a.idle_stop),
        (192, None, None)
    );
}

#[test]
fn defaults_table_applies_and_server_overrides() {
    let c = parse(
        Path::new("s.toml"),
        "[defaults]\nprobe_interval = \"5s\"\nenv = { A = \"1\" }\n[servers.a]\ncommand = \"x\"\nenv = { B = \"2\" }\n[servers.b]\ncommand = \"y\"\nprobe_interval = \"7s\"\n",
    )
    .unwrap();
    assert_eq!(c.servers["a"].probe_interval, Duration::from_secs(5));
    assert_eq!(c.servers["b"].probe_interval, Duration::from_secs(7));
    assert_eq!(c.servers["a"].env.len(), 2);
}

#[test]
fn unknown_key_names_line_and_key() {
    let e = bad("[servers.a]\ncommand = \"x\"\nstart_timout = \"1s\"\n");
    assert_eq!(e.line, 3);
    assert!(e.to_string().contains("start_timout"), "{e}");
}

#[test]
fn missing_command_names_the_key() {
    let e = bad("[supervisor]\n\n[servers.a]\nargs = []\n");
    assert_eq!(e.line, 3);
    assert_eq!(e.key, "servers.a.command");
}

#[test]
fn bad_duration_names_line_and_key() {
    let e = bad("[servers.a]\ncommand = \"x\"\n\nprobe_timeout = \"10\"\n");
    assert_eq!((e.line, e.key.as_str()), (4, "servers.a.probe_timeout"));
    let e = bad("[servers.a]\ncommand = \"x\"\nstop_grace = \"2 parsecs\"\n");
    assert_eq!(e.key, "servers.a.stop_grace");
}

#[test]
fn bad_name_and_wrong_type() {
    let e = bad("[servers.Bad]\ncommand = \"x\"\n");
    assert_eq!((e.line, e.key.as_str()), (1, "servers.Bad"));
    let e = bad("[servers.a]\ncommand = \"x\"\nprobe_failures = \"3\"\n");
    assert_eq!((e.line, e.key.as_str()), (3, "servers.a.probe_failures"));
    let e = bad("[servers.a]\ncommand = [\"x\"]\n");
    assert_eq!(e.key, "servers.a.command");
    let e = bad("[servers.a]\ncommand = \"x\"\nrestart = \"sometimes\"\n");
    assert_eq!(e.key, "servers.a.restart");
}

#[test]
fn relative_socket_dir_is_relative_to_the_file() {
    let c = parse(
        Path::new("/etc/mcp/s.toml"),
        "[supervisor]\nsocket_dir = \"run\"\n",
    )
    .unwrap();
    assert_eq!(c.supervisor.socket_dir, PathBuf::from("/etc/mcp/run"));
}

#[test]
fn socket_access_keys() {
    let c = parse(Path::new("s.toml"), "[servers.a]\ncommand = \"x\"\n").unwrap();
    assert_eq!(c.supervisor.socket_mode, 0o600);
    assert_eq!(c.supervisor.socket_group, None);
    assert!(c.supervisor.allowed_uids.is_empty());
    let c = parse(
        Path::new("s.toml"),
        "[supervisor]\nsocket_mode = \"0660\"\nsocket_group = \"0\"\nallowed_uids = [1000, 1001]\nallowed_gids = [50]\n",
    )
    .unwrap();
    assert_eq!(c.supervisor.socket_mode, 0o660);
    assert_eq!(c.supervisor.socket_group, Some(0));
    assert_eq!(c.supervisor.allowed_uids, vec![1000, 1001]);
    assert_eq!(c.supervisor.allowed_gids, vec![50]);
    let e = bad("[supervisor]\n\nsocket_mode = \"999\"\n");
    assert_eq!((e.line, e.key.as_str()), (3, "supervisor.socket_mode"));
    let e = bad("[supervisor]\nsocket_mode = \"0066\"\n");
    assert_eq!(e.key, "supervisor.socket_mode");
    let e = bad("[supervisor]\nsocket_group = \"no-such-group-xyz\"\n");
    assert_eq!((e.line, e.key.as_str()), (2, "supervisor.socket_group"));
    let e = bad("[supervisor]\nallowed_uids = [\"x\"]\n");
    assert_eq!(e.line, 2);
}

#[test]
fn user_and_group_are_resolved() {
    let c = parse(
        Path::new("s.toml"),
        "[servers.a]\ncommand = \"x\"\nuser = \"0\"\ngroup = \"0\"\n",
    )
    .unwrap();
    assert_eq!(c.servers["a"].user.as_deref(), Some("0"));
    assert_eq!(resolve_user("0").unwrap().uid, 0);
    let e = bad("[servers.a]\ncommand = \"x\"\nuser = \"no-such-user-xyz\"\n");
    assert_eq!((e.line, e.key.as_str()), (3, "servers.a.user"));
    let e = bad("[defaults]\ngroup = \"no-such-group-xyz\"\n[servers.a]\ncommand = \"x\"\n");
    assert_eq!((e.line, e.key.as_str()), (2, "defaults.group"));
}

#[test]
fn socket_dir_is_found_in_a_broken_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("s.toml");
    std::fs::write(
        &p,
        "[supervisor]\nsocket_dir = \"run\"\n[servers.a]\ncommand = \"x\"\nbogus = 1\n",
    )
    .unwrap();
    assert_eq!(socket_dir_of(&p).unwrap(), dir.path().join("run"));
    std::fs::write(
        &p,
        "[supervisor]\nsocket_dir = \"/x/run\"\n[servers.a]\nthis is not toml\n",
    )
    .unwrap();
    assert_eq!(socket_dir_of(&p).unwrap(), PathBuf::from("/x/run"));
    assert!(socket_dir_of(&dir.path().join("missing.toml")).is_err());
}

#[test]
fn a_bare_number_duration_says_how_to_write_it() {
    let e = bad("[servers.a]\ncommand = \"x\"\nprobe_timeout = 10\n");
    assert_eq!((e.line, e.key.as_str()), (3, "servers.a.probe_timeout"));
    assert!(e.message.contains("with a unit"), "{e}");
}

#[test]
fn durations_need_units() {
    assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
    assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
    assert!(parse_duration("5").is_err());
    assert!(parse_duration("").is_err());
}

#[test]
fn roots_are_uris_or_absolute_paths_and_client_roots_a_policy() {
    let c = parse(
        Path::new("s.toml"),
        "[defaults]\nroots = [\"/home/u/ws/\", \"git+ssh://h/r\"]\n[servers.a]\ncommand = \"x\"\n[servers.b]\ncommand = \"y\"\nroots = []\nclient_roots = \"none\"\n",
    )
    .unwrap();
    assert_eq!(
        c.servers["a"].roots,
        vec![
            serde_json::json!({"uri": "file:///home/u/ws/", "name": "ws"}),
            serde_json::json!({"uri": "git+ssh://h/r"}),
        ]
    );
    assert_eq!(c.servers["a"].client_roots, ClientRoots::Caller);
    assert!(c.servers["b"].roots.is_empty());
    assert_eq!(c.servers["b"].client_roots, ClientRoots::None);
    let e = bad("[servers.a]\ncommand = \"x\"\nroots = [\"relative/dir\"]\n");
    assert_eq!((e.line, e.key.as_str()), (3, "servers.a.roots"), "{e}");
    assert!(e.message.contains("relative/dir"), "{e}");
    let e = bad("[servers.a]\ncommand = \"x\"\nclient_roots = \"all\"\n");
    assert_eq!(
        (e.line, e.key.as_str()),
        (3, "servers.a.client_roots"),
        "{e}"
    );
}

#[test]
fn config_gaps_of_issue_14_are_errors_with_line_and_key() {
    let e = bad("[server.a]\ncommand = \"x\"\n");
    assert_eq!((e.line, e.key.as_str()), (1, "server"), "{e}");
    let e = bad("[servers.a]\ncommand = \"x\"\nprobe_timeout = \"0s\"\n");
    assert_eq!(
        (e.line, e.key.as_str()),
        (3, "servers.a.probe_timeout"),
        "{e}"
    );
    let long = "x".repeat(110);
    let e = bad(&format!(
        "[supervisor]\nsocket_dir = \"/tmp/{long}\"\n[servers.a]\ncommand = \"x\"\n"
    ));
    assert_eq!(e.key, "servers.a", "{e}");
    assert!(e.message.contains("over the 107"), "{e}");
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("s.toml");
    std::fs::write(&f, b"[servers.a]\ncommand = \"x\xff\"\n").unwrap();
    let e = load(&f).unwrap_err();
    assert_eq!(e.line, 2, "{e}");
    assert!(e.message.contains("not UTF-8"), "{e}");
    // With `user`, the child starts from a clean environment unless told otherwise.
    let c = parse(Path::new("s.toml"), "[servers.a]\ncommand = \"x\"\nuser = \"root\"\n[servers.b]\ncommand = \"x\"\nuser = \"root\"\nclean_env = false\n").unwrap();
    assert!(c.servers["a"].clean_env);
    assert!(!c.servers["b"].clean_env);
}

#[test]
fn http_keys_default_validate_and_refuse_a_remote_bind_unless_allowed() {
    let c = parse(
        Path::new("/etc/s.toml"),
        "[servers.a]\ncommand = \"x\"\nhttp = true\n",
    )
    .unwrap();
    assert!(c.servers["a"].http);
    assert_eq!(
        c.supervisor.http.listen,
        Some(DEFAULT_HTTP_LISTEN.parse().unwrap())
    );
    assert_eq!(c.supervisor.http.max_sessions, 256);
    let e = parse(
        Path::new("/etc/s.toml"),
        "[supervisor]\nhttp_listen = \"0.0.0.0:8931\"\n[servers.a]\ncommand = \"x\"\n",
    )
    .unwrap_err();
    assert_eq!((e.line, e.key.as_str()), (2, "supervisor.http_listen"));
    assert!(e.message.contains("http_allow_remote"), "{e}");
    let c = parse(
        Path::new("/etc/s.toml"),
        "[supervisor]\nhttp_listen = \"0.0.0.0:8931\"\nhttp_allow_remote = true\n[servers.a]\ncommand = \"x\"\n",
    )
    .unwrap();
    assert!(c.supervisor.http.listen.is_some());
    let c = parse(
        Path::new("/etc/s.toml"),
        "[supervisor]\nhttp_listen = \"off\"\n[servers.a]\ncommand = \"x\"\nhttp_token_file = \"tok\"\n",
    )
    .unwrap();
    assert_eq!(c.supervisor.http.listen, None);
    assert_eq!(
        c.servers["a"].http_token_file.as_deref(),
        Some(Path::new("/etc/tok"))
    );
    let e = parse(
        Path::new("/etc/s.toml"),
        "[supervisor]\nhttp_max_sessions = 0\n",
    )
    .unwrap_err();
    assert_eq!(e.key, "supervisor.http_max_sessions");
}

#[test]
fn container_keys_log_format_subreaper_and_required() {
    let c = parse(
        Path::new("/etc/s.toml"),
        "[supervisor]\nlog_format = \"json\"\nsubreaper = false\n[defaults]\nrequired = true\n[servers.a]\ncommand = \"x\"\n[servers.b]\ncommand = \"x\"\nrequired = false\n",
    )
    .unwrap();
    assert_eq!(c.supervisor.log_format, LogFormat::Json);
    assert!(!c.supervisor.subreaper);
    assert!(c.servers["a"].required && !c.servers["b"].required);
    let c = parse(Path::new("/etc/s.toml"), "[servers.a]\ncommand = \"x\"\n").unwrap();
    assert_eq!(c.supervisor.log_format, LogFormat::Auto);
    assert!(c.supervisor.subreaper && !c.servers["a"].required);
    let e = bad("[supervisor]\nlog_format = \"xml\"\n");
    assert_eq!((e.line, e.key.as_str()), (2, "supervisor.log_format"));
    assert!(e.message.contains("\"json\""), "{e}");
    // Readiness is the daemon's: changing `required` never restarts the child.
    let mut b = c.servers["a"].clone();
    b.required = true;
    assert!(c.servers["a"].same_child_but_roots(&b));
}

#[test]
fn otel_is_off_by_default_and_a_base_endpoint_gets_the_traces_path() {
    let c = parse(Path::new("s.toml"), "[servers.a]\ncommand = \"x\"\n").unwrap();
    assert_eq!(c.supervisor.otel, None);
    let c = parse(
        Path::new("s.toml"),
        "[supervisor]\notel_endpoint = \"http://127.0.0.1:4318\"\notel_service_name = \"pod-a\"\notel_headers = { \"x-api-key\" = \"k\" }\n[servers.a]\ncommand = \"x\"\n",
    )
    .unwrap();
    let o = c.supervisor.otel.unwrap();
    assert_eq!(o.traces_url, "http://127.0.0.1:4318/v1/traces");
    assert_eq!(o.service_name.as_deref(), Some("pod-a"));
    assert_eq!(o.headers, [("x-api-key".to_string(), "k".to_string())]);
    for (given, url) in [
        ("http://c:4318/", "http://c:4318/v1/traces"),
        ("http://c:4318/otlp", "http://c:4318/otlp/v1/traces"),
        (
            "http://c:4318/otlp/v1/traces",
            "http://c:4318/otlp/v1/traces",
        ),
        (
            "http://[::1]:4318/v1/traces/",
            "http://[::1]:4318/v1/traces",
        ),
    ] {
        assert_eq!(traces_url(given).as_deref(), Ok(url), "{given}");
    }
}

#[test]
fn bad_otel_keys_name_line_and_key() {
    for (line, key) in [
        (
            "otel_endpoint = \"https://c:4318\"",
            "supervisor.otel_endpoint",
        ),
        ("otel_endpoint = \"c:4318\"", "supervisor.otel_endpoint"),
        (
            "otel_endpoint = \"http:///v1/traces\"",
            "supervisor.otel_endpoint",
        ),
        (
            "otel_endpoint = \"http://c:4318/?a=b\"",
            "supervisor.otel_endpoint",
        ),
        (
            "otel_endpoint = \"https://u:secret@c:4318\"",
            "supervisor.otel_endpoint",
        ),
        ("otel_endpoint = 4318", "supervisor.otel_endpoint"),
        ("otel_service_name = \"x\"", "supervisor.otel_service_name"),
        ("otel_headers = { a = \"b\" }", "supervisor.otel_headers"),
    ] {
        let e = bad(&format!(
            "[supervisor]\n{line}\n[servers.a]\ncommand = \"x\"\n"
        ));
        assert_eq!((e.line, e.key.as_str()), (2, key), "{line}: {e}");
        assert!(!e.to_string().contains("secret"), "{e}");
    }
    for (extra, key) in [
        ("otel_service_name = \" \"", "supervisor.otel_service_name"),
        (
            "otel_headers = { \"bad name\" = \"v\" }",
            "supervisor.otel_headers.bad name",
        ),
        (
            "otel_headers = { a = \"line\\nbreak\" }",
            "supervisor.otel_headers.a",
        ),
    ] {
        let e = bad(&format!(
            "[supervisor]\notel_endpoint = \"http://c:4318\"\n{extra}\n[servers.a]\ncommand = \"x\"\n"
        ));
        assert_eq!((e.line, e.key.as_str()), (3, key), "{extra}: {e}");
        assert!(
            !e.to_string().contains("break"),
            "header values are not repeated: {e}"
        );
    }
}

#[test]
fn start_idle_stop_and_state_dir_issue_18() {
    let c = parse(
        Path::new("/etc/m/s.toml"),
        "[supervisor]\nsocket_dir = \"/run/x\"\nstate_dir = \"state\"\n[defaults]\nstart = \"on-demand\"\n[servers.a]\ncommand = \"x\"\nidle_stop = \"10m\"\n[servers.b]\ncommand = \"y\"\nstart = \"eager\"\nidle_stop = \"off\"\n",
    )
    .unwrap();
    let (a, b) = (&c.servers["a"], &c.servers["b"]);
    assert_eq!(a.start, StartMode::OnDemand);
    assert_eq!(a.idle_stop, Some(Duration::from_secs(600)));
    assert_eq!(a.cache_file, PathBuf::from("/etc/m/state/a.cache.json"));
    assert_eq!((b.start, b.idle_stop), (StartMode::Eager, None));
    // Neither key restarts the child when a reload changes it.
    let mut a2 = a.clone();
    a2.start = StartMode::Eager;
    a2.idle_stop = None;
    assert!(a2.same_child_but_roots(a));
    let e = bad("[servers.a]\ncommand = \"x\"\nstart = \"lazy\"\n");
    assert_eq!((e.line, e.key.as_str()), (3, "servers.a.start"));
    let e = bad("[servers.a]\ncommand = \"x\"\n\nidle_stop = \"0s\"\n");
    assert_eq!((e.line, e.key.as_str()), (4, "servers.a.idle_stop"));
    let e = bad("[servers.a]\ncommand = \"x\"\nidle_stop = 5\n");
    assert_eq!(e.key, "servers.a.idle_stop");
}

#[test]
fn limits_parse_sizes_and_counts_and_defaults_apply() {
    let c = parse(
        Path::new("s.toml"),
        "[defaults]\nmemory_max = \"512M\"\ntasks_max = 64\n[servers.a]\ncommand = \"x\"\nopen_files_max = 1024\n[servers.b]\ncommand = \"y\"\nmemory_max = \"256MiB\"\ntasks_max = \"max\"\n[servers.c]\ncommand = \"z\"\nmemory_max = 1073741824\n",
    )
    .unwrap();
    assert_eq!(c.supervisor.limits, LimitMode::Auto);
    let a = c.servers["a"].limits;
    assert_eq!(a.memory_max, Some(512_000_000));
    assert_eq!(a.tasks_max, Some(64));
    assert_eq!(a.open_files_max, Some(1024));
    let b = c.servers["b"].limits;
    assert_eq!(b.memory_max, Some(256 << 20));
    assert_eq!(b.tasks_max, None, "\"max\" lifts the [defaults] limit");
    assert_eq!(c.servers["c"].limits.memory_max, Some(1 << 30));
    let none = parse(Path::new("s.toml"), "[servers.a]\ncommand = \"x\"\n").unwrap();
    assert!(none.servers["a"].limits.is_empty());
    // A limit is part of the child: changing it restarts the child on reload.
    let mut other = c.servers["a"].clone();
    other.limits.tasks_max = Some(65);
    assert!(!other.same_child(&c.servers["a"]));
    assert!(!other.same_child_but_roots(&c.servers["a"]));
}

#[test]
fn bad_limits_name_line_and_key() {
    let e = bad("[servers.a]\ncommand = \"x\"\nmemory_max = \"lots\"\n");
    assert_eq!((e.line, e.key.as_str()), (3, "servers.a.memory_max"));
    assert!(e.message.contains("512M"), "{e}");
    // A bare number is bytes: 512 is under the minimum, and the message says to add a unit.
    let e = bad("[servers.a]\ncommand = \"x\"\n\nmemory_max = 512\n");
    assert_eq!((e.line, e.key.as_str()), (4, "servers.a.memory_max"));
    assert!(e.message.contains("unit"), "{e}");
    let e = bad("[defaults]\ntasks_max = 0\n[servers.a]\ncommand = \"x\"\n");
    assert_eq!((e.line, e.key.as_str()), (2, "defaults.tasks_max"));
    let e = bad("[servers.a]\ncommand = \"x\"\nopen_files_max = \"many\"\n");
    assert_eq!(e.key, "servers.a.open_files_max");
    let e = bad("[servers.a]\ncommand = \"x\"\nmemory_max = -5\n");
    assert_eq!(e.key, "servers.a.memory_max");
    let e = bad("[supervisor]\nlimits = \"cgroups\"\n");
    assert_eq!((e.line, e.key.as_str()), (2, "supervisor.limits"));
    assert!(e.message.contains("auto, cgroup, rlimit"), "{e}");
    for (text, mode) in [
        ("cgroup", LimitMode::Cgroup),
        ("rlimit", LimitMode::Rlimit),
        ("auto", LimitMode::Auto),
    ] {
        let c = parse(
            Path::new("s.toml"),
            &format!("[supervisor]\nlimits = \"{text}\"\n"),
        )
        .unwrap();
        assert_eq!(c.supervisor.limits, mode);
    }
}

/// The field names of a serde struct, read from its `Deserialize` impl: a deserializer that
/// records the `fields` serde passes to `deserialize_struct` and stops there.
fn field_names<T: for<'de> serde::Deserialize<'de>>() -> Vec<&'static str> {
    use serde::de::{self, Visitor};

    #[derive(Debug)]
    struct Stop;
    impl fmt::Display for Stop {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("stop")
        }
    }
    impl std::error::Error for Stop {}
    impl de::Error for Stop {
        fn custom<M: fmt::Display>(_: M) -> Self {
            Stop
        }
    }
    struct Names<'a>(&'a mut Vec<&'static str>);
    impl<'de> de::Deserializer<'de> for Names<'_> {
        type Error = Stop;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
            Err(Stop)
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Stop> {
            self.0.extend(fields);
            Err(Stop)
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
            byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
            identifier ignored_any
        }
    }
    let mut names = Vec::new();
    let _ = T::deserialize(Names(&mut names));
    names
}

#[test]
fn every_raw_key_has_exactly_one_row_and_every_row_a_key() {
    use keys::{Section, KEYS};
    let rows = |sections: &[Section]| {
        let mut names: Vec<&str> = KEYS
            .iter()
            .filter(|k| sections.contains(&k.section))
            .map(|k| k.name)
            .collect();
        names.sort_unstable();
        names
    };
    let mut supervisor = field_names::<raw::RawSupervisor>();
    supervisor.sort_unstable();
    assert!(!supervisor.is_empty());
    assert_eq!(rows(&[Section::Supervisor]), supervisor);
    let mut server = field_names::<raw::RawServer>();
    server.sort_unstable();
    assert!(server.contains(&"start_timeout"));
    assert_eq!(rows(&[Section::Server, Section::ServerOnly]), server);
    assert_eq!(rows(&[Section::MethodTimeout]), ["METHOD"]);
    let mut endpoint = field_names::<raw::RawEndpoint>();
    endpoint.sort_unstable();
    assert_eq!(rows(&[Section::Endpoint]), endpoint);
}

#[test]
fn every_number_row_has_a_bound_and_a_reason_and_its_default_within() {
    use keys::{Bound, Kind, KEYS};
    for k in KEYS {
        let numeric = matches!(k.kind, Kind::Duration | Kind::Size | Kind::Count);
        assert_eq!(
            numeric,
            k.bound != Bound::None,
            "{}: a duration, size or count has a bound, nothing else",
            k.name
        );
        assert_eq!(numeric, !k.why.is_empty(), "{}: a bound says why", k.name);
        if let Some(d) = k.default_duration() {
            assert_eq!(k.kind, Kind::Duration, "{}", k.name);
            assert_eq!(k.check_duration("default", d), Ok(()), "{}", k.name);
        }
        if let Some(n) = k.default_number() {
            assert_eq!(k.check_number(n), Ok(()), "{}", k.name);
        }
        if let Bound::Duration { max, .. } = k.bound {
            // Far from what `Instant` can hold, also three of them summed (stop budgets).
            assert!(max <= Duration::from_secs(7 * 86_400), "{}", k.name);
        }
        assert!(!k.meaning.is_empty(), "{}", k.name);
    }
}

#[test]
fn case_issue_26_a_huge_start_timeout_is_refused_naming_line_key_and_bound() {
    let e = bad("[servers.a]\ncommand = \"x\"\nstart_timeout = \"400000000000y\"\n");
    assert_eq!(
        (e.line, e.key.as_str()),
        (3, "servers.a.start_timeout"),
        "{e}"
    );
    assert!(e.message.contains("more than 1h"), "{e}");
    assert!(e.message.contains("400000000000y"), "{e}");
}

#[test]
fn every_bounded_key_takes_its_bound_and_refuses_one_past_it() {
    use keys::{Bound, Section, KEYS};
    for k in KEYS {
        let (at, past) = match k.bound {
            Bound::None => continue,
            Bound::Duration { max, .. } => (
                format!("\"{}\"", keys::show_duration(max)),
                format!("\"{}ns\"", max.as_nanos() + 1),
            ),
            Bound::Number { max, .. } => (max.to_string(), (max + 1).to_string()),
        };
        let text = |v: &str| match k.section {
            Section::Supervisor => format!(
                "[supervisor]\n{} = {v}\n[servers.a]\ncommand = \"x\"\n",
                k.name
            ),
            Section::MethodTimeout => {
                format!("[servers.a]\ncommand = \"x\"\n[servers.a.method_timeouts]\n\"tools/call\" = {v}\n")
            }
            _ if keys::URL_ONLY.contains(&k.name) => format!(
                "[servers.a]\nurl = \"https://example.com/mcp\"\n{} = {v}\n",
                k.name
            ),
            _ => format!("[servers.a]\ncommand = \"x\"\n{} = {v}\n", k.name),
        };
        // At the bound: accepted (backoff_initial needs backoff_max at least as long).
        let extra = if k.name == "backoff_initial" {
            "backoff_max = \"1d\"\n"
        } else {
            ""
        };
        if let Err(e) = parse(Path::new("s.toml"), &format!("{}{extra}", text(&at))) {
            panic!("{} = {at} is refused: {e}", k.name);
        }
        let e = bad(&text(&past));
        let line = if k.section == Section::MethodTimeout {
            4
        } else {
            2 + usize::from(k.section != Section::Supervisor)
        };
        assert_eq!(
            (e.line, e.key.as_str()),
            (
                line,
                k.path(Some("a")).replace("METHOD", "tools/call").as_str()
            ),
            "{e}"
        );
        assert!(e.message.contains("the most it may be"), "{}: {e}", k.name);
        assert!(
            e.message.contains(k.why),
            "{}: the reason is given: {e}",
            k.name
        );
    }
}

#[test]
fn zero_is_refused_where_it_would_fire_at_once_and_allowed_for_delays() {
    for key in [
        "request_timeout",
        "probe_interval",
        "client_stall_timeout",
        "era_probe_timeout",
    ] {
        let e = bad(&format!("[servers.a]\ncommand = \"x\"\n{key} = \"0s\"\n"));
        assert_eq!(e.key, format!("servers.a.{key}"));
        assert_eq!(e.message, "must be greater than 0");
    }
    let e = bad("[servers.a]\ncommand = \"x\"\nmethod_timeouts = { \"tools/call\" = \"0s\" }\n");
    assert_eq!(e.key, "servers.a.method_timeouts.tools/call", "{e}");
    let c = parse(
        Path::new("s.toml"),
        "[servers.a]\ncommand = \"x\"\nbackoff_initial = \"0s\"\nstop_grace = \"0s\"\nkill_timeout = \"0s\"\nqueue_wait = \"0s\"\nqueue_limit = 0\n",
    )
    .unwrap();
    assert_eq!(c.servers["a"].stop_grace, Duration::ZERO);
    assert_eq!(c.servers["a"].queue_limit, 0);
}

#[test]
fn backoff_initial_over_the_default_backoff_max_names_backoff_initial() {
    let e = bad("[servers.a]\ncommand = \"x\"\nbackoff_initial = \"2m\"\n");
    assert_eq!(
        (e.line, e.key.as_str()),
        (3, "servers.a.backoff_initial"),
        "{e}"
    );
    assert!(e.message.contains("60s"), "{e}");
    let e = bad("[servers.a]\ncommand = \"x\"\nbackoff_initial = \"2m\"\nbackoff_max = \"1m\"\n");
    assert_eq!(
        (e.line, e.key.as_str()),
        (4, "servers.a.backoff_max"),
        "{e}"
    );
}

#[test]
fn counts_and_sizes_past_their_bounds_are_refused_before_any_arithmetic() {
    for (line, key) in [
        (
            "max_inflight = 9223372036854775807",
            "servers.a.max_inflight",
        ),
        ("client_queue = 1000000", "servers.a.client_queue"),
        (
            "max_message_size = 17179869184",
            "servers.a.max_message_size",
        ),
        ("max_message_size = 100", "servers.a.max_message_size"),
        ("memory_max = \"16EiB\"", "servers.a.memory_max"),
        ("tasks_max = 9223372036854775807", "servers.a.tasks_max"),
        ("open_files_max = 2147483648", "servers.a.open_files_max"),
    ] {
        let e = bad(&format!("[servers.a]\ncommand = \"x\"\n{line}\n"));
        assert_eq!((e.line, e.key.as_str()), (3, key), "{line}: {e}");
    }
    for (line, key) in [
        ("max_clients = 0", "supervisor.max_clients"),
        (
            "max_clients = 9223372036854775807",
            "supervisor.max_clients",
        ),
        ("client_memory = 1024", "supervisor.client_memory"),
        (
            "http_max_requests = 1000000",
            "supervisor.http_max_requests",
        ),
        (
            "http_session_idle = \"30d\"",
            "supervisor.http_session_idle",
        ),
    ] {
        let e = bad(&format!("[supervisor]\n{line}\n"));
        assert_eq!((e.line, e.key.as_str()), (2, key), "{line}: {e}");
    }
}

#[test]
fn the_table_renders_defaults_and_bounds_as_the_docs_write_them() {
    assert_eq!(keys::START_TIMEOUT.default_text(), "\"60s\"");
    assert_eq!(keys::START_TIMEOUT.bound_text(), "above 0, up to 1h");
    assert_eq!(keys::HTTP_SESSION_IDLE.default_text(), "\"30m\"");
    assert_eq!(keys::STOP_GRACE.bound_text(), "0 to 1h");
    assert_eq!(keys::MAX_MESSAGE_SIZE.bound_text(), "1 KiB to 1 GiB");
    assert_eq!(keys::MAX_INFLIGHT.bound_text(), "1 to 65536");
    assert_eq!(keys::show_duration(Duration::from_millis(1500)), "1500ms");
    assert_eq!(keys::show_duration(Duration::from_secs(7 * 86_400)), "7d");
}

/// The configuration reference's two key tables (`| key | default | bound | meaning |`, in
/// docs/book/src/reference/configuration.md): (keys of the row, default cell, bound cell), for
/// the table under `heading`.
fn readme_rows(heading: &str) -> Vec<(Vec<String>, String, String)> {
    let readme = include_str!("../../../../docs/book/src/reference/configuration.md");
    let Some((_, after)) = readme.split_once(heading) else {
        panic!("the configuration reference has no {heading}");
    };
    after
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| {
            let cells: Vec<String> = l
                .split(" | ")
                .map(|c| c.trim_matches(['|', ' ']).to_string())
                .collect();
            let names = cells[0]
                .split(", ")
                .map(|n| n.trim_matches('`').to_string())
                .collect();
            (names, cells[1].clone(), cells[2].clone())
        })
        .collect()
}

#[test]
fn readme_lists_every_key_with_the_tables_default_and_bound() {
    use keys::{Default, Section, KEYS};
    for (heading, sections) in [
        ("### `[supervisor]`", &[Section::Supervisor][..]),
        (
            "### `[defaults]` and `[servers.NAME]`",
            &[Section::Server, Section::ServerOnly][..],
        ),
        ("### `[endpoints.NAME]`", &[Section::Endpoint][..]),
    ] {
        let rows = readme_rows(heading);
        let mut seen = Vec::new();
        for (names, default, bound) in &rows {
            for name in names {
                let Some(k) = KEYS
                    .iter()
                    .find(|k| k.name == name && sections.contains(&k.section))
                else {
                    panic!(
                        "the configuration reference's {heading} has a row `{name}` that is no key"
                    );
                };
                seen.push(k.name);
                // The values of `method_timeouts` are bounded in its row.
                let want = if k.name == "method_timeouts" {
                    format!("each {}", keys::METHOD_TIMEOUT.bound_text())
                } else {
                    k.bound_text()
                };
                assert_eq!(
                    bound, &want,
                    "the configuration reference's {heading} `{name}`: the bound"
                );
                if matches!(
                    k.default,
                    Default::Duration(_) | Default::Number(_) | Default::Flag(_)
                ) {
                    assert!(
                        default.contains(&format!("`{}`", k.default_text())),
                        "the configuration reference's {heading} `{name}`: default {default:?}, the table says {}",
                        k.default_text()
                    );
                }
            }
        }
        for k in KEYS.iter().filter(|k| sections.contains(&k.section)) {
            assert!(
                seen.contains(&k.name),
                "the configuration reference's {heading} has no row for `{}`",
                k.name
            );
        }
    }
}

#[test]
fn an_error_in_defaults_names_defaults_key_at_the_defaults_line() {
    for (line, key) in [
        ("start_timeout = \"abc\"", "defaults.start_timeout"),
        ("start_timeout = \"2h\"", "defaults.start_timeout"),
        ("probe_failures = 0", "defaults.probe_failures"),
        ("restart = \"sometimes\"", "defaults.restart"),
        ("protocol = \"1999\"", "defaults.protocol"),
        ("roots = [\"relative\"]", "defaults.roots"),
        ("client_roots = \"all\"", "defaults.client_roots"),
        ("start = \"lazy\"", "defaults.start"),
        ("idle_stop = \"0s\"", "defaults.idle_stop"),
        ("tasks_max = 0", "defaults.tasks_max"),
        ("memory_max = \"lots\"", "defaults.memory_max"),
        ("user = \"no-such-user-xyz\"", "defaults.user"),
        ("group = \"no-such-group-xyz\"", "defaults.group"),
        (
            "method_timeouts = { \"tools/call\" = \"0s\" }",
            "defaults.method_timeouts.tools/call",
        ),
        ("backoff_initial = \"2m\"", "defaults.backoff_initial"),
    ] {
        // With a server that takes the value, and with none at all.
        for servers in ["[servers.a]\ncommand = \"x\"\n", ""] {
            let e = bad(&format!("[supervisor]\n[defaults]\n{line}\n{servers}"));
            assert_eq!((e.line, e.key.as_str()), (3, key), "{line}: {e}");
        }
    }
    // A server's own value is still named as the server's.
    let e =
        bad("[defaults]\nprobe_failures = 2\n[servers.a]\ncommand = \"x\"\nprobe_failures = 0\n");
    assert_eq!(
        (e.line, e.key.as_str()),
        (5, "servers.a.probe_failures"),
        "{e}"
    );
    // backoff_max in [defaults] below a server's own backoff_initial: the server's key.
    let e = bad("[defaults]\nbackoff_max = \"10s\"\n[servers.a]\ncommand = \"x\"\nbackoff_initial = \"20s\"\n");
    assert_eq!(
        (e.line, e.key.as_str()),
        (5, "servers.a.backoff_initial"),
        "{e}"
    );
}

#[test]
fn a_defaults_sub_table_needs_no_defaults_header() {
    let c = parse(
        Path::new("s.toml"),
        "[defaults.env]\nA = \"b\"\n[defaults.method_timeouts]\n\"tools/call\" = \"5m\"\n[servers.a]\ncommand = \"x\"\n",
    )
    .unwrap();
    assert_eq!(c.servers["a"].env["A"], "b");
    assert_eq!(
        c.servers["a"].timeout_for("tools/call"),
        Duration::from_secs(300)
    );
    let e =
        bad("[defaults.method_timeouts]\n\"tools/call\" = \"0s\"\n[servers.a]\ncommand = \"x\"\n");
    assert_eq!(
        (e.line, e.key.as_str()),
        (2, "defaults.method_timeouts.tools/call"),
        "{e}"
    );
    let e = bad("[servers.a]\ncommand = \"x\"\n[defaults]\n\nargs = [\"-v\"]\n");
    assert_eq!((e.line, e.key.as_str()), (5, "defaults.args"), "{e}");
}

#[test]
fn an_explicit_http_token_file_must_exist_and_hold_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("s.toml");
    let text = |extra: &str| format!("[servers.a]\ncommand = \"x\"\nhttp = true\n{extra}\n");
    let load_text = |t: &str| {
        std::fs::write(&f, t).unwrap();
        load(&f)
    };
    let e = load_text(&text("http_token_file = \"missing.token\"")).unwrap_err();
    assert_eq!(
        (e.line, e.key.as_str()),
        (4, "servers.a.http_token_file"),
        "{e}"
    );
    assert!(e.message.contains("missing.token"), "{e}");
    assert!(e.message.contains("does not exist"), "{e}");
    // From [defaults]: named there.
    let e = load_text("[defaults]\nhttp_token_file = \"/nonexistent/t\"\n[servers.a]\ncommand = \"x\"\nhttp = true\n").unwrap_err();
    assert_eq!(
        (e.line, e.key.as_str()),
        (2, "defaults.http_token_file"),
        "{e}"
    );
    // A directory, or a token too short, is refused without repeating the token.
    let e = load_text(&text(&format!("http_token_file = {:?}", dir.path()))).unwrap_err();
    assert!(e.message.contains("not a regular file"), "{e}");
    std::fs::write(dir.path().join("short.token"), "s3cr3t\n").unwrap();
    let e = load_text(&text("http_token_file = \"short.token\"")).unwrap_err();
    assert_eq!(e.key, "servers.a.http_token_file", "{e}");
    assert!(e.message.contains("16"), "{e}");
    assert!(!e.to_string().contains("s3cr3t"), "{e}");
    std::fs::write(dir.path().join("good.token"), "0123456789abcdef0123\n").unwrap();
    load_text(&text("http_token_file = \"good.token\"")).unwrap();
    // Not served over HTTP: the file is never read, so not checked; the default file is
    // created at start when missing.
    load_text("[servers.a]\ncommand = \"x\"\nhttp_token_file = \"missing.token\"\n").unwrap();
    load_text(&text("")).unwrap();
}

#[test]
fn portable_checks_values_but_not_users_groups_or_files_of_this_host() {
    let text = "[supervisor]\nsocket_group = \"no-such-group-xyz\"\n[defaults]\nuser = \"no-such-user-xyz\"\n[servers.a]\ncommand = \"x\"\ngroup = \"no-such-group-xyz\"\nhttp = true\nhttp_token_file = \"/nonexistent/token\"\n";
    let e = parse(Path::new("s.toml"), text).unwrap_err();
    assert_eq!(e.key, "supervisor.socket_group", "{e}");
    let c = parse_with(Path::new("s.toml"), text, Checks::Portable).unwrap();
    assert_eq!(c.supervisor.socket_group, None);
    assert_eq!(c.servers["a"].user.as_deref(), Some("no-such-user-xyz"));
    assert_eq!(c.servers["a"].group.as_deref(), Some("no-such-group-xyz"));
    // Values are still checked.
    let e = parse_with(
        Path::new("s.toml"),
        "[servers.a]\ncommand = \"x\"\nuser = \"nobody-here\"\nstart_timeout = \"2h\"\n",
        Checks::Portable,
    )
    .unwrap_err();
    assert_eq!(
        (e.line, e.key.as_str()),
        (4, "servers.a.start_timeout"),
        "{e}"
    );
    let e = parse_with(
        Path::new("s.toml"),
        "[servers.a]\ncommand = \"\"\n",
        Checks::Portable,
    )
    .unwrap_err();
    assert_eq!(e.key, "servers.a.command");
}

#[test]
fn a_remote_metrics_listen_needs_metrics_allow_remote() {
    let e = bad("[supervisor]\n\nmetrics_listen = \"0.0.0.0:9464\"\n");
    assert_eq!(
        (e.line, e.key.as_str()),
        (3, "supervisor.metrics_listen"),
        "{e}"
    );
    assert!(e.message.contains("metrics_allow_remote = true"), "{e}");
    let e = bad("[supervisor]\nmetrics_listen = \"[::]:9464\"\nmetrics_allow_remote = false\n");
    assert_eq!(e.key, "supervisor.metrics_listen", "{e}");
    let c = parse(
        Path::new("s.toml"),
        "[supervisor]\nmetrics_listen = \"0.0.0.0:9464\"\nmetrics_allow_remote = true\n",
    )
    .unwrap();
    assert_eq!(
        c.supervisor.metrics_listen,
        Some("0.0.0.0:9464".parse().unwrap())
    );
    for local in ["127.0.0.1:9464", "[::1]:9464", "127.0.0.2:0"] {
        let c = parse(
            Path::new("s.toml"),
            &format!("[supervisor]\nmetrics_listen = \"{local}\"\n"),
        )
        .unwrap();
        assert!(c.supervisor.metrics_listen.is_some());
    }
}

#[test]
fn a_file_with_secrets_that_others_can_read_is_named_with_its_mode_and_keys_never_values() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("s.toml");
    let chmod = |mode| std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).unwrap();
    std::fs::write(
        &f,
        "[supervisor]\notel_endpoint = \"http://127.0.0.1:4318\"\notel_headers = { authorization = \"Basic c2VjcmV0\" }\n[defaults]\nenv = { A = \"x\" }\n[servers.a]\ncommand = \"x\"\nenv = { GITHUB_TOKEN = \"ghp_supersecret\" }\n[servers.b]\ncommand = \"x\"\n",
    )
    .unwrap();
    chmod(0o644);
    let c = load(&f).unwrap();
    let w = exposure(&c).expect("a warning");
    assert!(w.contains(&f.display().to_string()), "{w}");
    assert!(w.contains("0644") && w.contains("group and others"), "{w}");
    for key in ["supervisor.otel_headers", "defaults.env", "servers.a.env"] {
        assert!(w.contains(key), "{key}: {w}");
    }
    assert!(!w.contains("servers.b"), "b sets nothing itself: {w}");
    for value in ["ghp_supersecret", "c2VjcmV0", "GITHUB_TOKEN"] {
        assert!(!w.contains(value), "{value}: {w}");
    }
    chmod(0o640);
    assert!(exposure(&c).is_some_and(|w| w.contains("0640") && w.contains("group")));
    chmod(0o600);
    assert_eq!(exposure(&c), None);
    // Nothing secret in it: no warning, whatever the mode.
    std::fs::write(&f, "[servers.a]\ncommand = \"x\"\nenv = {}\n").unwrap();
    chmod(0o644);
    assert_eq!(exposure(&load(&f).unwrap()), None);
}

#[test]
fn a_url_server_gets_its_defaults_and_keeps_local_roots_to_itself() {
    // Portable: `ca.pem` does not exist here.
    let c = parse_with(
        Path::new("/etc/s.toml"),
        "[defaults]\nclient_roots = \"caller\"\nenv = { A = \"1\" }\nmax_connections = 4\n[servers.gh]\nurl = \"https://api.example.com/mcp\"\nheaders = { Authorization = { env = \"GH_TOKEN\", prefix = \"Bearer \" }, X-Org = \"acme\", X-Key = { file = \"key.txt\" } }\ntls_ca_file = \"ca.pem\"\n[servers.local]\ncommand = \"x\"\n",
        Checks::Portable,
    )
    .unwrap();
    let gh = &c.servers["gh"];
    let r = gh.remote.as_ref().unwrap();
    assert_eq!(r.url, "https://api.example.com/mcp");
    assert_eq!(r.max_connections, 4);
    assert_eq!(r.connect_timeout, Duration::from_secs(10));
    assert_eq!(r.tls_ca_file.as_deref(), Some(Path::new("/etc/ca.pem")));
    assert!(!r.tls_skip_verify && !r.allow_plain_http);
    let names: Vec<&str> = r.headers.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["Authorization", "X-Key", "X-Org"]);
    assert_eq!(
        r.headers[1].1,
        HeaderSource::File {
            path: "/etc/key.txt".into(),
            prefix: String::new()
        }
    );
    // `[defaults]`' `caller` is not enough to send local roots to a hosted service.
    assert_eq!(gh.client_roots, ClientRoots::None);
    assert!(gh.command.is_empty() && gh.env.is_empty());
    assert_eq!(c.servers["local"].client_roots, ClientRoots::Caller);
    assert!(c.servers["local"].remote.is_none());
    let own = parse(
        Path::new("s.toml"),
        "[servers.gh]\nurl = \"http://127.0.0.1:9/mcp\"\nclient_roots = \"caller\"\n",
    )
    .unwrap();
    assert_eq!(own.servers["gh"].client_roots, ClientRoots::Caller);
    // Secrets never show in the config's Debug form.
    let secret = parse(
        Path::new("s.toml"),
        "[servers.gh]\nurl = \"https://h/mcp\"\nheaders = { Authorization = \"Bearer s3cret-value\" }\n",
    )
    .unwrap();
    assert!(!format!("{:?}", secret.servers["gh"]).contains("s3cret"));
}

#[test]
fn bad_url_servers_name_line_and_key() {
    for (text, line, key, says) in [
        ("[servers.a]\ncommand = \"x\"\nurl = \"https://h/mcp\"\n", 2, "servers.a.command", "exactly one of"),
        ("[servers.a]\nurl = \"https://h/mcp\"\nargs = [\"-v\"]\n", 3, "servers.a.args", "child process"),
        ("[servers.a]\nurl = \"https://h/mcp\"\nenv = { A = \"1\" }\n", 1, "servers.a.env", "child process"),
        ("[servers.a]\nurl = \"https://h/mcp\"\nmemory_max = \"1G\"\n", 3, "servers.a.memory_max", "child process"),
        ("[servers.a]\ncommand = \"x\"\nheaders = { A = \"b\" }\n", 3, "servers.a.headers", "only for a url server"),
        ("[servers.a]\ncommand = \"x\"\nmax_connections = 2\n", 3, "servers.a.max_connections", "only for a url server"),
        ("[defaults]\nurl = \"https://h/mcp\"\n[servers.a]\ncommand = \"x\"\n", 2, "defaults.url", "belongs in"),
        ("[defaults]\nheaders = { A = \"b\" }\n[servers.a]\ncommand = \"x\"\n", 2, "defaults.headers", "belongs in"),
        ("[defaults.oauth]\nclient_id = \"c\"\n[servers.a]\ncommand = \"x\"\n", 1, "defaults.oauth", "belongs in"),
        ("[servers.a]\nurl = \"https://h/mcp\"\nheaders = { Authorization = \"Bearer x\" }\n[servers.a.oauth]\n", 4, "servers.a.oauth", "choose one"),
        ("[servers.a]\nurl = \"https://h/mcp\"\n[servers.a.oauth]\ngrant = \"password\"\n", 4, "servers.a.oauth.grant", "expected"),
        ("[servers.a]\nurl = \"https://h/mcp\"\n[servers.a.oauth]\ngrant = \"client_credentials\"\n", 4, "servers.a.oauth.grant", "client_credentials needs"),
        ("[servers.a]\nurl = \"https://h/mcp\"\n[servers.a.oauth]\nclient_metadata_url = \"http://x/m.json\"\n", 4, "servers.a.oauth.client_metadata_url", "https"),
        ("[servers.a]\nurl = \"https://h/mcp\"\n[servers.a.oauth]\nsigning_algorithm = \"HS256\"\n", 4, "servers.a.oauth.signing_algorithm", "expected one of"),
        ("[servers.a]\nurl = \"https://h/mcp\"\n[servers.a.oauth]\nflavor = 1\n", 4, "servers.a.oauth.flavor", "unknown field"),
        ("[servers.a]\ncommand = \"x\"\n[servers.a.oauth]\n", 3, "servers.a.oauth", "only for a url server"),
        ("[servers.a]\nurl = \"http://example.com/mcp\"\n", 2, "servers.a.url", "not loopback"),
        ("[servers.a]\nurl = \"https://user:pw@h/mcp\"\n", 2, "servers.a.url", "credentials"),
        ("[servers.a]\nurl = \"https://h/sse\"\n", 2, "servers.a.url", "legacy HTTP+SSE"),
        ("[servers.a]\nurl = \"ftp://h/mcp\"\n", 2, "servers.a.url", "scheme"),
        ("[servers.a]\nurl = \"not a url\"\n", 2, "servers.a.url", "not a URL"),
        ("[servers.a]\nurl = \"https://h/mcp\"\nheaders = { A = { env = \"X\", file = \"y\" } }\n", 3, "servers.a.headers.A", "exactly one of"),
        ("[servers.a]\nurl = \"https://h/mcp\"\nheaders = { Mcp-Session-Id = \"x\" }\n", 3, "servers.a.headers.Mcp-Session-Id", "supervisor's to set"),
        ("[servers.a]\nurl = \"https://h/mcp\"\nheaders = { \"a b\" = \"x\" }\n", 3, "servers.a.headers.a b", "not a valid"),
    ] {
        let e = bad(text);
        assert_eq!((e.line, e.key.as_str()), (line, key), "{text}: {e}");
        assert!(e.message.contains(says), "{text}: {e}");
    }
    // Plain http beyond loopback when the operator says so.
    let c = parse(
        Path::new("s.toml"),
        "[servers.a]\nurl = \"http://mcp.internal:8080/mcp\"\nallow_plain_http = true\n",
    )
    .unwrap();
    assert!(c.servers["a"].remote.as_ref().unwrap().allow_plain_http);
}

#[test]
fn a_server_name_holding_the_separator_is_refused_when_an_endpoint_serves_it_else_warned() {
    // Issue 47 N19: `a__b`'s `echo` and `a`'s `b__echo` would both be `a__b__echo`.
    let e = bad("[servers.a]\ncommand = \"x\"\n[servers.a__b]\ncommand = \"x\"\n[servers.a_b]\ncommand = \"x\"\n\n[endpoints.desk]\nservers = [\"a\", \"a__b\"]\n");
    assert_eq!((e.line, e.key.as_str()), (3, "servers.a__b"), "{e}");
    assert!(e.message.contains("endpoint `desk`"), "{e}");
    // `a_b` is taken: the rename offered is free.
    assert!(e.message.contains("rename it, for example to `a-b`"), "{e}");
    let e = bad("[servers.x___y__]\ncommand = \"x\"\n[endpoints.all]\nservers = [\"*\"]\n");
    assert_eq!(e.key, "servers.x___y__", "{e}");
    assert!(e.message.contains("`x_y_`"), "{e}");
    let c = parse(
        Path::new("s.toml"),
        "[servers.a]\ncommand = \"x\"\n[servers.a__b]\ncommand = \"x\"\n[endpoints.desk]\nservers = [\"a\"]\n",
    )
    .unwrap();
    assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
    assert_eq!(c.warnings[0].line, 3);
    assert!(c.warnings[0]
        .to_string()
        .contains("rename it, for example to `a_b`"));
    let c = parse(Path::new("s.toml"), "[servers.a_b]\ncommand = \"x\"\n").unwrap();
    assert!(c.warnings.is_empty());
}
