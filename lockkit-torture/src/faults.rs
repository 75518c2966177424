//! Network and node faults, one at a time, on a seeded schedule:
//!
//! - `--proxy`: one [`FaultProxy`] per server of the backend URL (workers
//!   get the URL rewritten to the proxies); faults: `latency` above the
//!   backend's response timeout for a while, `lose_replies` (requests run,
//!   replies are lost, the client re-sends on a new connection) for a short
//!   while, `reset` of every open connection.
//! - `--node-faults` (`redlock://` with at least 3 private nodes): `pause`
//!   one node (`CLIENT PAUSE ms ALL`), `kill` it and restart it empty
//!   (`--node-restart-cmd`), `wipe` it (`FLUSHALL`). The node rejoins at
//!   once: the client's restart guard keeps a node that lost its keys out
//!   of every quorum until the leases it carried have ended. With
//!   `--node-outage` (for runs with `restart_guard=off`), a wiped node is
//!   silenced that long in the same write (`CLIENT PAUSE`): Redlock's
//!   delayed restart, which the restart command must then keep too.
//!
//! Only one fault runs at a time and on one server of a multi-node URL, so
//! a Redlock quorum stays. With `--node-outage`, a fault that removes keys
//! (`kill`, `wipe`) waits until no fault ran for a quiet time, so the holds
//! a fault left short of one node have ended before another node loses its
//! keys; without it, faults follow each other freely.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use lockkit::raw::ConnectUrl;
use lockkit::testkit::{Fault, FaultProxy};

use crate::chaos::args::RunArgs;
use crate::chaos::rng::SplitMix;
use crate::log::{Event, mono_ns, nanos};

/// The fault kinds in the order a run starts with (so a short run sees
/// each enabled one once), then drawn at random.
const CYCLE: [&str; 6] = ["kill", "latency", "lose_replies", "reset", "pause", "wipe"];

fn destructive(kind: &str) -> bool {
    matches!(kind, "kill" | "wipe")
}

/// The fault in progress.
struct Active {
    kind: &'static str,
    node: usize,
    until: u64,
    restart: Option<Child>,
    /// The pause before the next fault, drawn when this one started.
    gap: u64,
    /// Whether the fault could be started.
    started: bool,
}

/// The fault schedule and what it acts on.
pub struct Faults {
    rt: tokio::runtime::Runtime,
    proxies: Vec<FaultProxy>,
    nodes: Vec<SocketAddr>,
    kinds: Vec<&'static str>,
    latency_base: Duration,
    every: Duration,
    quiet: u64,
    /// How long a wiped node stays silent (`--node-outage`; 0: it rejoins
    /// at once).
    outage: u64,
    restart_cmd: Option<String>,
    active: Option<Active>,
    last_end: u64,
    next_at: u64,
    cycle: usize,
}

/// A Redis command on a fresh connection; its one-line reply.
fn redis_cmd(addr: SocketAddr, args: &[&str]) -> Result<String, String> {
    redis_cmds(addr, &[args])
}

/// Redis commands sent in one write on a fresh connection (the server runs
/// them back to back); the last one-line reply.
fn redis_cmds(addr: SocketAddr, cmds: &[&[&str]]) -> Result<String, String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).map_err(|e| format!("{addr}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    let mut req = String::new();
    for args in cmds {
        req.push_str(&format!("*{}\r\n", args.len()));
        for a in *args {
            req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
    }
    s.write_all(req.as_bytes()).map_err(|e| format!("{addr}: {e}"))?;
    let mut reader = BufReader::new(s);
    let mut last = String::new();
    for args in cmds {
        let mut line = String::new();
        reader.read_line(&mut line).map_err(|e| format!("{addr}: {e}"))?;
        let line = line.trim_end().to_owned();
        if line.starts_with('-') || line.is_empty() {
            return Err(format!("{addr}: {args:?}: {line}"));
        }
        last = line;
    }
    Ok(last)
}

/// A query parameter of `url`, as written.
fn param<'u>(url: &'u str, key: &str) -> Option<&'u str> {
    let (_, query) = url.split_once('?')?;
    query
        .split('&')
        .find_map(|kv| kv.split_once('=').filter(|(k, _)| *k == key).map(|(_, v)| v))
}

fn with_param(url: &str, kv: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{kv}")
}

impl Faults {
    /// Sets up the proxies and node faults `args` ask for; the URL workers
    /// connect to. `None` when neither is asked for.
    pub fn setup(args: &RunArgs) -> Result<(Option<Faults>, String), String> {
        if !args.proxy && !args.node_faults {
            return Ok((None, args.backend.clone()));
        }
        let parsed = ConnectUrl::parse(&args.backend).map_err(|e| e.to_string())?;
        let scheme = args
            .backend
            .split_once("://")
            .map_or("", |(s, _)| s)
            .to_ascii_lowercase();
        if matches!(scheme.as_str(), "redis+sentinel" | "redis+cluster" | "rediss") {
            return Err(format!(
                "--proxy/--node-faults: {scheme}:// is not supported (servers announce their own addresses, or TLS)"
            ));
        }
        if parsed.hosts.is_empty() {
            return Err("--proxy/--node-faults need a server URL (host:port)".into());
        }
        let mut nodes = Vec::new();
        for h in &parsed.hosts {
            let port = h
                .port
                .ok_or_else(|| format!("--proxy/--node-faults: {} needs an explicit port", h.host))?;
            let addr = (h.host.as_str(), port)
                .to_socket_addrs()
                .map_err(|e| format!("{}: {e}", h.host))?
                .next()
                .ok_or_else(|| format!("{}: no address", h.host))?;
            if !addr.ip().is_loopback() {
                return Err(format!("torture faults act on loopback servers only, not {addr}"));
            }
            nodes.push(addr);
        }
        let redlock = scheme == "redlock";
        let mut kinds = Vec::new();
        let mut url = args.backend.clone();
        // The timeout a slow server must outlast: the backend's response
        // timeout where it has one (set short), else a guess of what hurts.
        let mut latency_base = match scheme.as_str() {
            "redis" => {
                if param(&url, "response_timeout").is_none() {
                    url = with_param(&url, "response_timeout=300ms");
                }
                humantime::parse_duration(param(&url, "response_timeout").unwrap_or("300ms"))
                    .map_err(|e| format!("response_timeout: {e}"))?
            }
            "redlock" => param(&url, "node_timeout")
                .map(humantime::parse_duration)
                .transpose()
                .map_err(|e| format!("node_timeout: {e}"))?
                .unwrap_or(Duration::from_millis(100)),
            "zk" | "zookeeper" => {
                param(&url, "session_timeout")
                    .map(humantime::parse_duration)
                    .transpose()
                    .map_err(|e| format!("session_timeout: {e}"))?
                    .unwrap_or(Duration::from_secs(10))
                    / 4
            }
            _ => Duration::from_millis(500),
        };
        if let Some(l) = args.latency {
            latency_base = l;
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .map_err(|e| format!("fault proxy runtime: {e}"))?;
        let mut proxies = Vec::new();
        if args.proxy {
            let (_, rest) = url.split_once("://").ok_or("a URL with ://")?;
            let authority_len = rest.find(['/', '?']).unwrap_or(rest.len());
            let head_len = url.len() - rest.len();
            let mut authority = rest[..authority_len].to_owned();
            for (h, addr) in parsed.hosts.iter().zip(&nodes) {
                let proxy = rt
                    .block_on(FaultProxy::start(*addr))
                    .map_err(|e| format!("fault proxy for {addr}: {e}"))?;
                let written = format!("{}:{}", h.host, h.port.unwrap_or_default());
                if !authority.contains(&written) {
                    return Err(format!("--proxy: cannot find {written} in the URL's authority"));
                }
                authority = authority.replacen(&written, &proxy.addr().to_string(), 1);
                proxies.push(proxy);
            }
            url = format!("{}{authority}{}", &url[..head_len], &rest[authority_len..]);
            kinds.extend(["latency", "lose_replies", "reset"]);
        }
        if args.node_faults {
            if !redlock || nodes.len() < 3 {
                return Err(
                    "--node-faults: only for redlock:// with at least 3 nodes (a single server that loses its keys loses every hold)"
                        .into(),
                );
            }
            kinds.push("pause");
            kinds.push("wipe");
            if args.node_restart_cmd.is_some() {
                kinds.push("kill");
            } else {
                eprintln!("torture: no --node-restart-cmd: node kills are off");
            }
        }
        let start = mono_ns();
        Ok((
            Some(Faults {
                rt,
                proxies,
                nodes,
                kinds,
                latency_base,
                every: args.fault_every,
                quiet: match args.node_outage.is_zero() {
                    true => 0,
                    false => nanos(args.node_outage + args.node_outage / 2 + Duration::from_secs(1)),
                },
                outage: nanos(args.node_outage),
                restart_cmd: args.node_restart_cmd.clone(),
                active: None,
                last_end: 0,
                next_at: start + nanos(args.fault_every),
                cycle: 0,
            }),
            url,
        ))
    }

    /// The enabled fault kinds.
    pub fn kinds(&self) -> &[&'static str] {
        &self.kinds
    }

    /// Ends a fault that is due, starts the next one when it is time.
    pub fn tick(&mut self, now: u64, end: u64, rng: &mut SplitMix, event: &mut dyn FnMut(Event)) {
        if self.active.is_some() {
            self.end_due(now, false, event);
            return;
        }
        if now < self.next_at || now + 2_000_000_000 >= end || self.kinds.is_empty() {
            return;
        }
        let quiet_ok = now >= self.last_end + self.quiet;
        let kind = if self.cycle < CYCLE.len() {
            // The first round: every enabled kind once, in order.
            let Some(&k) = CYCLE[self.cycle..].iter().find(|k| self.kinds.contains(k)) else {
                self.cycle = CYCLE.len();
                return;
            };
            if destructive(k) && !quiet_ok {
                return;
            }
            self.cycle = CYCLE.iter().position(|c| *c == k).unwrap_or(0) + 1;
            k
        } else {
            let k = self.kinds[rng.below(self.kinds.len() as u64) as usize];
            if destructive(k) && !quiet_ok {
                let mild: Vec<&'static str> = self.kinds.iter().copied().filter(|k| !destructive(k)).collect();
                if mild.is_empty() {
                    return;
                }
                mild[rng.below(mild.len() as u64) as usize]
            } else {
                k
            }
        };
        let node = rng.below(self.nodes.len() as u64) as usize;
        self.start(kind, node, now, rng, event);
    }

    fn start(&mut self, kind: &'static str, node: usize, now: u64, rng: &mut SplitMix, event: &mut dyn FnMut(Event)) {
        let ms = |lo: u64, hi: u64, rng: &mut SplitMix| lo + rng.below(hi - lo + 1);
        let addr = self.nodes[node];
        let (until, detail, restart, failed) = match kind {
            "latency" => {
                let base = self.latency_base.as_millis() as u64;
                let d = Duration::from_millis(ms(base * 6 / 5, base * 5 / 2, rng).max(1));
                self.proxies[node].set(Fault::Latency(d));
                let lasts = 2 * nanos(d) + ms(0, 1000, rng) * 1_000_000;
                (now + lasts, format!("{d:?} each way"), None, None)
            }
            "lose_replies" => {
                self.proxies[node].set(Fault::LoseReplies);
                (now + ms(100, 400, rng) * 1_000_000, String::new(), None, None)
            }
            "reset" => {
                let n = self.proxies[node].reset_all();
                (now, format!("{n} connections"), None, None)
            }
            "pause" => {
                let p = ms(300, 1000, rng);
                let r = redis_cmd(addr, &["CLIENT", "PAUSE", &p.to_string(), "ALL"]);
                (now + p * 1_000_000, format!("{p} ms"), None, r.err())
            }
            "wipe" if self.outage == 0 => {
                let r = redis_cmd(addr, &["FLUSHALL"]);
                (now, "rejoins at once".to_owned(), None, r.err())
            }
            "wipe" => {
                // Flushed and silenced in one write: no vote in between.
                let out = (self.outage / 1_000_000).to_string();
                let r = redis_cmds(addr, &[&["FLUSHALL"], &["CLIENT", "PAUSE", &out, "ALL"]]);
                (now + self.outage, format!("silent {out} ms"), None, r.err())
            }
            "kill" => {
                let cmd = self
                    .restart_cmd
                    .as_deref()
                    .unwrap_or("false")
                    .replace("{port}", &addr.port().to_string());
                match Command::new("sh")
                    .args(["-c", &cmd])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .spawn()
                {
                    Ok(c) => (u64::MAX, cmd, Some(c), None),
                    Err(e) => (now, cmd, None, Some(e.to_string())),
                }
            }
            _ => unreachable!("unknown fault kind {kind}"),
        };
        event(Event::Fault {
            t: mono_ns(),
            kind: kind.to_owned(),
            node,
            detail,
        });
        let gap = nanos(self.every.mul_f64(0.5 + rng.unit()));
        self.active = Some(Active {
            kind,
            node,
            until,
            restart,
            gap,
            started: failed.is_none(),
        });
        if let Some(e) = &failed {
            eprintln!("torture: fault {kind} on {addr} failed: {e}");
            self.end_due(now, true, event);
        } else if until == now {
            self.end_due(now, false, event);
        }
    }

    /// Ends the active fault if it is due (or `force`: now, waiting for a
    /// node restart to finish).
    fn end_due(&mut self, now: u64, force: bool, event: &mut dyn FnMut(Event)) {
        let Some(a) = self.active.as_mut() else { return };
        let ok = match a.restart.as_mut() {
            Some(c) => {
                let status = if force {
                    c.wait().ok()
                } else {
                    c.try_wait().ok().flatten()
                };
                match status {
                    Some(s) => {
                        if !s.success() {
                            eprintln!("torture: the node restart command failed: {s}");
                        }
                        s.success()
                    }
                    None => return,
                }
            }
            None => {
                if !force && now < a.until {
                    return;
                }
                true
            }
        };
        let a = self.active.take().expect("active");
        let ok = ok && a.started;
        match a.kind {
            "latency" | "lose_replies" => self.proxies[a.node].set(Fault::Pass),
            "pause" | "wipe" if force => {
                let _ = redis_cmd(self.nodes[a.node], &["CLIENT", "UNPAUSE"]);
            }
            _ => {}
        }
        let t = mono_ns();
        self.last_end = t;
        self.next_at = t + a.gap;
        event(Event::FaultEnd { t, ok });
    }

    /// Heals everything (the run is over); proxies keep forwarding until
    /// dropped.
    pub fn finish(&mut self, event: &mut dyn FnMut(Event)) {
        self.end_due(mono_ns(), true, event);
        for p in &self.proxies {
            p.set(Fault::Pass);
        }
    }

    /// The runtime the proxies run on (for the inspection after the run).
    pub fn runtime(&self) -> &tokio::runtime::Runtime {
        &self.rt
    }
}
