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
    assert_eq!((e.line, e.key.as_str()), (2, "servers.a.group"));
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
    assert_eq!((e.line, e.key.as_str()), (2, "servers.a.tasks_max"));
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
