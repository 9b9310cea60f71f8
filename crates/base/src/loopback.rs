//! Who owns the other end of a TCP connection made on this machine (issue 47 §2, decisions:
//! "peer uid of a loopback TCP connection ... read from the kernel, matched at accept; a
//! connection whose owner cannot be found is dropped").
//!
//! A Unix socket tells its peer's uid (`SO_PEERCRED`); a TCP socket does not. But when the
//! client end of a TCP connection is a socket of this host (in this network namespace), the
//! kernel knows that socket and the uid that created it. [`tcp_peer_uid`] asks for it:
//!
//! 1. `NETLINK_SOCK_DIAG` (`sock_diag(7)`), an exact lookup of the one socket whose local
//!    address is the connection's peer and whose remote address is ours: one round trip, no
//!    scan, whatever the number of sockets on the host;
//! 2. where that facility cannot be used (no netlink in a sandbox, no `tcp_diag` in the
//!    kernel), `/proc/self/net/tcp` and `/proc/self/net/tcp6`, read line by line up to
//!    [`PROC_MAX`] bytes each (`proc(5)`).
//!
//! Both answer the same socket's `uid`, with the same rules: the entry must be exactly this
//! connection's client end (its local address is `peer`, its remote address is `local`; a
//! listener or another connection never matches), in a connected state, and still held by a
//! process (inode not 0). A socket that was closed (orphaned, or in `TIME_WAIT`, whose uid the
//! kernel reports as 0) has no owner: `None`. IPv4, IPv6 and v4-mapped IPv6 addresses (a
//! dual-stack listener, or a client's IPv6 socket connected to an IPv4 address) are all
//! matched on the address they denote.
//!
//! The uid is the socket's creator (`sk_uid`: the effective fs uid of the process that called
//! `socket(2)`), as the reading process's user namespace sees it. A socket created by one user
//! and passed to another keeps its creator's uid; a root service that connects on a user's
//! behalf shows uid 0.
//!
//! This module imports nothing from the crate (a leaf): the `login` redirect listener uses it,
//! and any TCP listener may.

use std::net::{IpAddr, SocketAddr};

/// The uid that owns the client end of the TCP connection from `peer` to `local` (the
/// addresses of a connection this process accepted: its `local_addr()` and `peer_addr()`),
/// read from the kernel; `None` when no socket of this host holds that end now (a remote
/// client, a closed connection, a `TIME_WAIT` remnant) or the kernel cannot be asked.
///
/// Call it while holding the accepted connection: once it is closed, its 4-tuple may be
/// reused. It blocks for a netlink round trip (microseconds); only where `sock_diag` cannot be
/// used does it read `/proc/self/net/tcp{,6}` (up to [`PROC_MAX`] bytes each; milliseconds on
/// a host with very many sockets). Never panics.
pub fn tcp_peer_uid(local: SocketAddr, peer: SocketAddr) -> Option<u32> {
    let (local, peer) = (canonical(local), canonical(peer));
    if local.is_ipv4() != peer.is_ipv4() {
        return None;
    }
    match diag::lookup(peer, local) {
        diag::Answer::Found(uid) => return Some(uid),
        diag::Answer::Absent => {
            // ENOENT also means "no diag module for this family": our own end of the
            // connection is always there, so when the kernel cannot find it either, the
            // lookup says nothing and /proc decides.
            if !matches!(diag::lookup(local, peer), diag::Answer::Absent) {
                return None;
            }
        }
        diag::Answer::Unavailable => {}
    }
    proc_net::lookup(local, peer)
}

/// The most read of each of `/proc/self/net/tcp` and `tcp6`, in bytes (about 200,000
/// sockets at ~150 bytes a line); an entry past it is not found.
pub const PROC_MAX: u64 = 32 << 20;

/// `addr` with a v4-mapped IPv6 address (`::ffff:a.b.c.d`) as the IPv4 address it denotes.
fn canonical(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), v6.port()),
            None => addr,
        },
        SocketAddr::V4(_) => addr,
    }
}

/// TCP states of a connection's end that a process may still hold (`include/net/tcp_states.h`):
/// ESTABLISHED, FIN_WAIT1, FIN_WAIT2 (after `shutdown`), CLOSE_WAIT, LAST_ACK, CLOSING. Never
/// LISTEN, SYN_*, TIME_WAIT or CLOSE.
fn connected(state: u8) -> bool {
    matches!(state, 1 | 4 | 5 | 8 | 9 | 11)
}

/// One socket as the kernel describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    local: SocketAddr,
    remote: SocketAddr,
    state: u8,
    uid: u32,
    inode: u64,
}

impl Entry {
    /// The uid, when this entry is the held client end of the connection `peer` → `local`.
    fn owner(&self, local: SocketAddr, peer: SocketAddr) -> Option<u32> {
        (canonical(self.local) == peer
            && canonical(self.remote) == local
            && connected(self.state)
            && self.inode != 0)
            .then_some(self.uid)
    }
}

/// `NETLINK_SOCK_DIAG` exact lookup (`linux/inet_diag.h`, `linux/sock_diag.h`).
mod diag {
    use super::Entry;
    use nix::sys::socket::{
        recv, sendto, socket, AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol,
        SockType,
    };
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
    use std::os::fd::AsRawFd;

    const SOCK_DIAG_BY_FAMILY: u16 = 20;
    const NLMSG_ERROR: u16 = 2;
    const NLM_F_REQUEST: u16 = 1;
    const HEADER: usize = 16;
    /// `struct inet_diag_req_v2`.
    const REQ: usize = 56;
    /// `struct inet_diag_msg`.
    const MSG: usize = 72;
    const SEQ: u32 = 0x6d63_7073;

    pub(super) enum Answer {
        /// The held client end, and its uid.
        Found(u32),
        /// The kernel has no such socket (or, ENOENT too, no diag module for the family), or
        /// has one that is not a held client end.
        Absent,
        /// The kernel could not be asked, or answered something else.
        Unavailable,
    }

    /// The socket whose local address is `src` and remote address `dst` (both canonical).
    pub(super) fn lookup(src: SocketAddr, dst: SocketAddr) -> Answer {
        let Ok(fd) = socket(
            AddressFamily::Netlink,
            SockType::Datagram,
            SockFlag::SOCK_CLOEXEC,
            SockProtocol::NetlinkSockDiag,
        ) else {
            return Answer::Unavailable;
        };
        let req = request(src, dst);
        if sendto(
            fd.as_raw_fd(),
            &req,
            &NetlinkAddr::new(0, 0),
            MsgFlags::empty(),
        )
        .is_err()
        {
            return Answer::Unavailable;
        }
        // The kernel answers a netlink request within the `sendto`: the reply is queued by
        // now, and reading never waits.
        let mut buf = [0u8; 8192];
        let Ok(n) = recv(fd.as_raw_fd(), &mut buf, MsgFlags::MSG_DONTWAIT) else {
            return Answer::Unavailable;
        };
        match parse(buf.get(..n).unwrap_or_default()) {
            Reply::Socket(e) => match e.owner(dst, src) {
                Some(uid) => Answer::Found(uid),
                None => Answer::Absent,
            },
            Reply::Error(e) if e == -libc::ENOENT => Answer::Absent,
            Reply::Error(_) | Reply::Malformed => Answer::Unavailable,
        }
    }

    fn octets(ip: IpAddr) -> [u8; 16] {
        let mut out = [0u8; 16];
        match ip {
            IpAddr::V4(v4) => {
                for (o, b) in out.iter_mut().zip(v4.octets()) {
                    *o = b;
                }
            }
            IpAddr::V6(v6) => out = v6.octets(),
        }
        out
    }

    /// The request: `nlmsghdr` + `inet_diag_req_v2` for TCP, one socket by its 4-tuple
    /// (`src`:`sport` its local end), any state, no cookie.
    pub(super) fn request(src: SocketAddr, dst: SocketAddr) -> Vec<u8> {
        let mut m = Vec::with_capacity(HEADER + REQ);
        m.extend_from_slice(&((HEADER + REQ) as u32).to_ne_bytes());
        m.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        m.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
        m.extend_from_slice(&SEQ.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        let family = if src.is_ipv4() {
            libc::AF_INET
        } else {
            libc::AF_INET6
        };
        m.push(family as u8);
        m.push(libc::IPPROTO_TCP as u8);
        m.extend_from_slice(&[0, 0]);
        m.extend_from_slice(&u32::MAX.to_ne_bytes());
        m.extend_from_slice(&src.port().to_be_bytes());
        m.extend_from_slice(&dst.port().to_be_bytes());
        m.extend_from_slice(&octets(src.ip()));
        m.extend_from_slice(&octets(dst.ip()));
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(&u32::MAX.to_ne_bytes());
        m.extend_from_slice(&u32::MAX.to_ne_bytes());
        m
    }

    #[derive(Debug, PartialEq)]
    pub(super) enum Reply {
        Socket(Entry),
        /// `NLMSG_ERROR`'s code (a negative errno).
        Error(i32),
        Malformed,
    }

    fn u32_at(b: &[u8], at: usize) -> Option<u32> {
        Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
    }

    fn port_at(b: &[u8], at: usize) -> Option<u16> {
        Some(u16::from_be_bytes(b.get(at..at + 2)?.try_into().ok()?))
    }

    fn addr_at(b: &[u8], at: usize, family: u8, port: u16) -> Option<SocketAddr> {
        let raw: [u8; 16] = b.get(at..at + 16)?.try_into().ok()?;
        let ip = match i32::from(family) {
            libc::AF_INET => {
                let [a, b, c, d, ..] = raw;
                IpAddr::V4(Ipv4Addr::new(a, b, c, d))
            }
            libc::AF_INET6 => IpAddr::V6(Ipv6Addr::from(raw)),
            _ => return None,
        };
        Some(SocketAddr::new(ip, port))
    }

    /// The first message of a reply to [`request`] (one datagram, any bytes).
    pub(super) fn parse(b: &[u8]) -> Reply {
        let (Some(len), Some(kind), Some(seq)) = (
            u32_at(b, 0),
            b.get(4..6)
                .and_then(|t| t.try_into().ok())
                .map(u16::from_ne_bytes),
            u32_at(b, 8),
        ) else {
            return Reply::Malformed;
        };
        let Some(msg) = b.get(HEADER..len as usize) else {
            return Reply::Malformed;
        };
        if seq != SEQ {
            return Reply::Malformed;
        }
        match kind {
            NLMSG_ERROR => match u32_at(msg, 0) {
                Some(code) => Reply::Error(code as i32),
                None => Reply::Malformed,
            },
            SOCK_DIAG_BY_FAMILY if msg.len() >= MSG => {
                let socket = (|| {
                    let (family, state) = (*msg.first()?, *msg.get(1)?);
                    Some(Entry {
                        local: addr_at(msg, 8, family, port_at(msg, 4)?)?,
                        remote: addr_at(msg, 24, family, port_at(msg, 6)?)?,
                        state,
                        uid: u32_at(msg, 64)?,
                        inode: u64::from(u32_at(msg, 68)?),
                    })
                })();
                socket.map_or(Reply::Malformed, Reply::Socket)
            }
            _ => Reply::Malformed,
        }
    }
}

/// `/proc/self/net/tcp` and `tcp6` (`proc(5)`; `net/ipv4/tcp_ipv4.c`, `net/ipv6/tcp_ipv6.c`).
mod proc_net {
    use super::{Entry, PROC_MAX};
    use std::io::{BufRead, BufReader, Read};
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

    pub(super) fn lookup(local: SocketAddr, peer: SocketAddr) -> Option<u32> {
        let files: &[&str] = if peer.is_ipv4() {
            // A client's IPv6 socket connected to an IPv4 address is listed in tcp6.
            &["/proc/self/net/tcp", "/proc/self/net/tcp6"]
        } else {
            &["/proc/self/net/tcp6"]
        };
        files.iter().find_map(|f| {
            let file = std::fs::File::open(f).ok()?;
            search(BufReader::new(file.take(PROC_MAX)), local, peer)
        })
    }

    /// The owner found in a table's text (its heading line and entries), read line by line.
    pub(super) fn search(mut r: impl BufRead, local: SocketAddr, peer: SocketAddr) -> Option<u32> {
        let mut line = Vec::new();
        loop {
            line.clear();
            match r.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
            let found = std::str::from_utf8(&line)
                .ok()
                .and_then(parse_line)
                .and_then(|e| e.owner(local, peer));
            if found.is_some() {
                return found;
            }
        }
    }

    /// One entry: `sl local rem st tx:rx tr:when retrnsmt uid timeout inode ...`, addresses as
    /// `HEX:PORT`, each 32-bit word of an address printed as the native-endian integer whose
    /// bytes are the address's. `None` for the heading and anything else.
    pub(super) fn parse_line(line: &str) -> Option<Entry> {
        let mut f = line.split_ascii_whitespace();
        let sl = f.next()?;
        if !sl.ends_with(':') {
            return None;
        }
        let local = address(f.next()?)?;
        let remote = address(f.next()?)?;
        let state = u8::from_str_radix(f.next()?, 16).ok()?;
        let (_queues, _timer, _retransmits) = (f.next()?, f.next()?, f.next()?);
        let uid = f.next()?.parse().ok()?;
        let _timeout = f.next()?;
        let inode = f.next()?.parse().ok()?;
        Some(Entry {
            local,
            remote,
            state,
            uid,
            inode,
        })
    }

    fn address(text: &str) -> Option<SocketAddr> {
        let (hex, port) = text.split_once(':')?;
        let port = u16::from_str_radix(port, 16).ok()?;
        if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let word = |i: usize| {
            hex.get(i * 8..i * 8 + 8)
                .and_then(|w| u32::from_str_radix(w, 16).ok())
                .map(u32::to_ne_bytes)
        };
        let ip = match hex.len() {
            8 => IpAddr::V4(Ipv4Addr::from(word(0)?)),
            32 => {
                let mut b = [0u8; 16];
                for (i, chunk) in b.chunks_mut(4).enumerate() {
                    chunk.copy_from_slice(&word(i)?);
                }
                IpAddr::V6(Ipv6Addr::from(b))
            }
            _ => return None,
        };
        Some(SocketAddr::new(ip, port))
    }
}

#[cfg(test)]
mod tests {
    use super::diag::{self, Reply};
    use super::proc_net::{parse_line, search};
    use super::*;
    use proptest::prelude::*;
    use std::net::{TcpListener, TcpStream};

    fn euid() -> u32 {
        unsafe { libc::geteuid() }
    }

    /// A connection on `ip`: (the accepted end, the client end).
    fn pair(ip: &str) -> Option<(TcpStream, TcpStream)> {
        let l = TcpListener::bind((ip, 0)).ok()?;
        let c = TcpStream::connect(l.local_addr().ok()?).ok()?;
        let (s, _) = l.accept().ok()?;
        Some((s, c))
    }

    fn ends(s: &TcpStream) -> (SocketAddr, SocketAddr) {
        (s.local_addr().unwrap(), s.peer_addr().unwrap())
    }

    #[test]
    fn a_loopback_peer_is_its_creators_uid_both_ways() {
        let (s, _c) = pair("127.0.0.1").unwrap();
        let (local, peer) = ends(&s);
        assert_eq!(tcp_peer_uid(local, peer), Some(euid()));
        assert_eq!(proc_net::lookup(local, peer), Some(euid()));
        assert!(matches!(diag::lookup(peer, local), diag::Answer::Found(u) if u == euid()));
        // Swapped: that is our own (server) end, not a client's.
        assert_eq!(tcp_peer_uid(peer, local), Some(euid()));
        // Another port: no such connection.
        let other = SocketAddr::new(peer.ip(), peer.port().wrapping_add(1));
        assert_eq!(tcp_peer_uid(local, other), None);
    }

    #[test]
    fn ipv6_and_v4_mapped_peers_are_found() {
        if let Some((s, _c)) = pair("::1") {
            let (local, peer) = ends(&s);
            assert_eq!(tcp_peer_uid(local, peer), Some(euid()));
            assert_eq!(proc_net::lookup(local, peer), Some(euid()));
        }
        // A dual-stack listener sees an IPv4 client as ::ffff:127.0.0.1.
        if let Ok(l) = TcpListener::bind("[::]:0") {
            let port = l.local_addr().unwrap().port();
            let _c = TcpStream::connect(("127.0.0.1", port)).unwrap();
            let (s, _) = l.accept().unwrap();
            let (local, peer) = ends(&s);
            if peer.is_ipv6() {
                assert_eq!(tcp_peer_uid(local, peer), Some(euid()), "{local} {peer}");
                assert_eq!(
                    proc_net::lookup(canonical(local), canonical(peer)),
                    Some(euid())
                );
            }
        }
    }

    #[test]
    fn a_closed_client_has_no_owner() {
        let (s, c) = pair("127.0.0.1").unwrap();
        let (local, peer) = ends(&s);
        drop(c);
        // The client end is orphaned or in TIME_WAIT (uid reported 0): no owner.
        let gone = (0..100).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(10));
            tcp_peer_uid(local, peer).is_none()
        });
        assert!(gone);
        assert_eq!(proc_net::lookup(local, peer), None);
    }

    #[test]
    fn kernel_lines_parse() {
        let v4 = "   1: 0100007F:A0C3 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  1000        0 4242 1 0000000000000000 20 4 30 10 -1";
        let e = parse_line(v4).unwrap();
        assert_eq!(e.local, "127.0.0.1:41155".parse().unwrap());
        assert_eq!(e.remote, "127.0.0.1:8080".parse().unwrap());
        assert_eq!((e.state, e.uid, e.inode), (1, 1000, 4242));
        let v6 = "   0: 00000000000000000000000001000000:1F90 0000000000000000FFFF00000100007F:A0C3 01 00000000:00000000 00:00000000 00000000     0        0 77 1 0000000000000000 20 4 30 10 -1";
        let e = parse_line(v6).unwrap();
        assert_eq!(e.local, "[::1]:8080".parse().unwrap());
        assert_eq!(e.remote, "[::ffff:127.0.0.1]:41155".parse().unwrap());
        assert!(parse_line("  sl  local_address rem_address   st tx_queue").is_none());
        // TIME_WAIT remnants: uid 0, inode 0.
        let tw = "   2: 0100007F:A0C3 0100007F:1F90 06 00000000:00000000 03:00001770 00000000     0        0 0 3 0000000000000000";
        let e = parse_line(tw).unwrap();
        let (local, peer) = (e.remote, e.local);
        assert_eq!(e.owner(local, peer), None);
        let text = format!("header\n{tw}\n{v4}\n");
        assert_eq!(search(text.as_bytes(), local, peer), Some(1000));
    }

    fn kernel_hex(ip: IpAddr) -> String {
        let bytes = match ip {
            IpAddr::V4(v4) => v4.octets().to_vec(),
            IpAddr::V6(v6) => v6.octets().to_vec(),
        };
        bytes
            .chunks(4)
            .map(|w| format!("{:08X}", u32::from_ne_bytes(w.try_into().unwrap())))
            .collect()
    }

    fn diag_reply(e: &Entry, seq: u32) -> Vec<u8> {
        let mut m = vec![0u8; 16 + 72];
        m[0..4].copy_from_slice(&(88u32).to_ne_bytes());
        m[4..6].copy_from_slice(&20u16.to_ne_bytes());
        m[8..12].copy_from_slice(&seq.to_ne_bytes());
        let b = &mut m[16..];
        b[0] = if e.local.is_ipv4() { 2 } else { 10 };
        b[1] = e.state;
        b[4..6].copy_from_slice(&e.local.port().to_be_bytes());
        b[6..8].copy_from_slice(&e.remote.port().to_be_bytes());
        let put = |b: &mut [u8], ip: IpAddr| match ip {
            IpAddr::V4(v4) => b[..4].copy_from_slice(&v4.octets()),
            IpAddr::V6(v6) => b.copy_from_slice(&v6.octets()),
        };
        put(&mut b[8..24], e.local.ip());
        put(&mut b[24..40], e.remote.ip());
        b[64..68].copy_from_slice(&e.uid.to_ne_bytes());
        b[68..72].copy_from_slice(&(e.inode as u32).to_ne_bytes());
        m
    }

    fn any_addr() -> impl Strategy<Value = SocketAddr> {
        prop_oneof![
            (any::<[u8; 4]>(), any::<u16>())
                .prop_map(|(ip, p)| SocketAddr::new(IpAddr::V4(ip.into()), p)),
            (any::<[u8; 16]>(), any::<u16>())
                .prop_map(|(ip, p)| SocketAddr::new(IpAddr::V6(ip.into()), p)),
        ]
    }

    proptest! {
        #[test]
        fn any_text_parses_without_panic(text in ".{0,300}", bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = parse_line(&text);
            let a: SocketAddr = "127.0.0.1:1".parse().unwrap();
            let _ = search(&bytes[..], a, a);
            let _ = search(text.as_bytes(), a, a);
            let _ = diag::parse(&bytes);
        }

        #[test]
        fn kernel_entries_read_back(local in any_addr(), remote in any_addr(), state in 0u8..16, uid: u32, inode: u32) {
            let line = format!(
                "  12: {}:{:04X} {}:{:04X} {:02X} 00000000:00000000 00:00000000 00000000 {:>5} 0 {} 1 0000000000000000",
                kernel_hex(local.ip()), local.port(), kernel_hex(remote.ip()), remote.port(), state, uid, inode
            );
            let e = parse_line(&line);
            if local.is_ipv4() == remote.is_ipv4() {
                let e = e.unwrap();
                prop_assert_eq!((e.local, e.remote, e.state, e.uid, e.inode), (local, remote, state, uid, u64::from(inode)));
                let entry = Entry { local, remote, state, uid, inode: u64::from(inode) };
                prop_assert_eq!(diag::parse(&diag_reply(&entry, 0x6d63_7073)), Reply::Socket(entry));
                prop_assert_eq!(diag::parse(&diag_reply(&entry, 7)), Reply::Malformed);
                let owned = connected(state) && inode != 0;
                prop_assert_eq!(e.owner(canonical(remote), canonical(local)), owned.then_some(uid));
            }
        }

        #[test]
        fn truncated_replies_are_malformed(cut in 0usize..88) {
            let e = Entry {
                local: "127.0.0.1:5".parse().unwrap(),
                remote: "127.0.0.1:6".parse().unwrap(),
                state: 1, uid: 3, inode: 9,
            };
            let r = diag_reply(&e, 0x6d63_7073);
            prop_assert_eq!(diag::parse(&r[..cut]), Reply::Malformed);
        }
    }

    #[test]
    fn requests_have_the_kernels_layout() {
        let r = diag::request(
            "127.0.0.1:258".parse().unwrap(),
            "127.0.0.2:772".parse().unwrap(),
        );
        assert_eq!(r.len(), 72);
        assert_eq!(u32::from_ne_bytes(r[0..4].try_into().unwrap()), 72);
        assert_eq!((r[16], r[17]), (2, 6));
        assert_eq!(&r[24..28], &[1, 2, 3, 4]);
        assert_eq!(&r[28..32], &[127, 0, 0, 1]);
        assert_eq!(&r[44..48], &[127, 0, 0, 2]);
        assert_eq!(&r[64..72], &[0xff; 8]);
    }
}
