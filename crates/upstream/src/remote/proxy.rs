//! Which forward proxy the supervisor's HTTP clients use (issue 47 §5, N20): a url server's
//! session and its sign-in ([`super::sign_in_of`]) take `HTTP_PROXY`, `HTTPS_PROXY` and
//! `ALL_PROXY` from the daemon's environment exactly as reqwest reads them (upper case first,
//! then lower case; `ALL_PROXY` for a scheme that has none; nothing at all under CGI, when
//! `REQUEST_METHOD` is set), and the user's `NO_PROXY` (or `no_proxy`), to which loopback is
//! always added: `localhost` (and its subdomains), `127.0.0.0/8`, `::1` and the IPv4-mapped
//! `::ffff:127.0.0.0/104`. A sidecar on loopback is reached directly, so its bearer token never
//! travels through a proxy (a proxy on the path reads plain `http://` whole).
//!
//! Only the URL's host as written is compared (as `NO_PROXY` always is): a name that merely
//! resolves to loopback still goes through the proxy. Nothing here changes the process
//! environment: children inherit the daemon's variables untouched.

/// The hosts never sent through a proxy, in `NO_PROXY`'s syntax.
pub const LOOPBACK: &str = "localhost, 127.0.0.0/8, ::1, ::ffff:127.0.0.0/104";

/// The proxies the environment names, and the hosts excluded from them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// For `http://` URLs: `HTTP_PROXY`, else `ALL_PROXY`.
    pub http: Vec<String>,
    /// For `https://` URLs: `HTTPS_PROXY`, else `ALL_PROXY`.
    pub https: Vec<String>,
    /// The user's `NO_PROXY` with [`LOOPBACK`] added.
    pub no_proxy: String,
}

/// What the environment `var` (a variable's value, when set) asks for. Each of `http` and
/// `https` lists the values to try in order (the scheme's own variable, then `ALL_PROXY`):
/// the first that is a valid proxy URL is used, as reqwest does.
pub fn plan(var: impl Fn(&str) -> Option<String>) -> Plan {
    // The first of the two spellings that is set, even empty (reqwest's order).
    let first = |upper: &str, lower: &str| var(upper).or_else(|| var(lower));
    let user_no = first("NO_PROXY", "no_proxy").unwrap_or_default();
    let no_proxy = if user_no.trim().is_empty() {
        LOOPBACK.to_string()
    } else {
        format!("{user_no}, {LOOPBACK}")
    };
    if var("REQUEST_METHOD").is_some() {
        // reqwest ignores the proxy variables of a CGI program (httpoxy).
        return Plan {
            http: Vec::new(),
            https: Vec::new(),
            no_proxy,
        };
    }
    let all = first("ALL_PROXY", "all_proxy");
    let list = |own: Option<String>| {
        own.into_iter()
            .chain(all.clone())
            .filter(|v| !v.trim().is_empty())
            .collect::<Vec<_>>()
    };
    Plan {
        http: list(first("HTTP_PROXY", "http_proxy")),
        https: list(first("HTTPS_PROXY", "https_proxy")),
        no_proxy,
    }
}

/// `builder` with the daemon environment's proxies, loopback excluded (see the module).
pub fn apply(builder: reqwest::ClientBuilder) -> reqwest::ClientBuilder {
    apply_plan(builder, &plan(|name| std::env::var(name).ok()))
}

/// `builder` with the proxies of `plan`; an unusable proxy value is skipped, as reqwest skips
/// it.
pub fn apply_plan(builder: reqwest::ClientBuilder, plan: &Plan) -> reqwest::ClientBuilder {
    // No proxy from the system's defaults: only what the plan says.
    let mut builder = builder.no_proxy();
    let no = || reqwest::NoProxy::from_string(&plan.no_proxy);
    if let Some(p) = plan.http.iter().find_map(|v| reqwest::Proxy::http(v).ok()) {
        builder = builder.proxy(p.no_proxy(no()));
    }
    if let Some(p) = plan
        .https
        .iter()
        .find_map(|v| reqwest::Proxy::https(v).ok())
    {
        builder = builder.proxy(p.no_proxy(no()));
    }
    builder
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn the_environment_is_read_as_reqwest_reads_it_and_loopback_is_always_excluded() {
        let p = plan(env(&[
            ("http_proxy", "http://lower:1"),
            ("HTTP_PROXY", "http://upper:1"),
            ("all_proxy", "socks5h://all:1"),
            ("no_proxy", "corp.example, 10.0.0.0/8"),
        ]));
        assert_eq!(p.http, ["http://upper:1", "socks5h://all:1"]);
        assert_eq!(p.https, ["socks5h://all:1"]);
        assert_eq!(p.no_proxy, format!("corp.example, 10.0.0.0/8, {LOOPBACK}"));
        // Nothing set: no proxy, loopback listed anyway.
        let p = plan(env(&[]));
        assert!(p.http.is_empty() && p.https.is_empty());
        assert_eq!(p.no_proxy, LOOPBACK);
        // An empty upper-case variable hides the lower-case one, as in reqwest.
        let p = plan(env(&[("HTTPS_PROXY", ""), ("https_proxy", "http://x:1")]));
        assert!(p.https.is_empty());
        // CGI: no proxy at all.
        let p = plan(env(&[
            ("REQUEST_METHOD", "GET"),
            ("HTTP_PROXY", "http://x:1"),
        ]));
        assert!(p.http.is_empty());
    }

    #[test]
    fn the_exclusion_list_covers_every_loopback_form_and_nothing_else() {
        // reqwest's own matcher (hyper-util's `NoProxy`), through a client that would use the
        // proxy: only what it excludes is compared here, by building the same list.
        let no = hyper_util::client::proxy::matcher::Matcher::builder()
            .http("http://proxy.invalid:3128")
            .no(plan(env(&[("NO_PROXY", "corp.example")])).no_proxy)
            .build();
        let through = |url: &str| no.intercept(&url.parse().unwrap()).is_some();
        for direct in [
            "http://localhost:8080/mcp",
            "http://LOCALHOST/mcp",
            "http://sidecar.localhost/mcp",
            "http://127.0.0.1:9/mcp",
            "http://127.8.9.10/mcp",
            "http://[::1]:9/mcp",
            "http://[::ffff:127.0.0.1]:9/mcp",
            "http://corp.example/mcp",
            "http://api.corp.example/mcp",
        ] {
            assert!(!through(direct), "{direct} must not go through the proxy");
        }
        for proxied in [
            "http://example.com/mcp",
            "http://128.0.0.1/mcp",
            "http://[::2]/mcp",
            "http://localhost.example.com/mcp",
            "http://10.0.0.1/mcp",
        ] {
            assert!(through(proxied), "{proxied} keeps the proxy");
        }
    }
}
