//! The bare-metal deployment: the systemd units (packaging/systemd: the agent's and the
//! FleetLock server's) as systemd itself reads them, the Debian package that scripts/deb builds
//! (`ROTA_TEST_DEB`), and the programs' side of the units on a real notify socket: the agent's
//! READY=1, WATCHDOG=1 and STOPPING=1, the FleetLock server's WATCHDOG=1, STOPPING=1 and its
//! exit on SIGTERM.

use rota_store::{SqliteStore, StoreExt};
use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rota_core::NodeName;

const ROTA: &str = env!("CARGO_BIN_EXE_rota");
const PATIENCE: Duration = Duration::from_secs(30);
const UNIT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../packaging/systemd/rota-agent.service"
);
const ENV_FILE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../packaging/systemd/rota-agent.env"
);
const FLEETLOCK_UNIT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../packaging/systemd/rota-fleetlock.service"
);
const FLEETLOCK_ENV_FILE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../packaging/systemd/rota-fleetlock.env"
);

fn read(path: impl AsRef<Path>) -> Vec<u8> {
    let path = path.as_ref();
    std::fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `systemd-analyze`, or `None` when it is missing and `ROTA_TEST_NO_SYSTEMD=1` says to skip.
fn systemd_analyze() -> Option<Command> {
    match Command::new("systemd-analyze").arg("--version").output() {
        Ok(out) if out.status.success() => Some(Command::new("systemd-analyze")),
        Ok(_) | Err(_) if std::env::var("ROTA_TEST_NO_SYSTEMD").as_deref() == Ok("1") => {
            eprintln!("SKIPPED: systemd-analyze is missing and ROTA_TEST_NO_SYSTEMD=1");
            None
        }
        Ok(out) => panic!("systemd-analyze --version failed: {}", text(&out.stderr)),
        Err(e) => panic!(
            "systemd-analyze cannot run ({e}): the unit is not checked. Install systemd \
             (apt-get install systemd), or set ROTA_TEST_NO_SYSTEMD=1 to skip this test"
        ),
    }
}

/// `systemd-analyze verify` of the unit at `path` (named `name`): no complaint.
fn verify_unit(path: &str, name: &str) {
    let Some(mut analyze) = systemd_analyze() else {
        return;
    };
    // verify checks that ExecStart's program exists: the binary under test stands in for the
    // package's /usr/bin/rota.
    let unit = text(&read(path));
    let here = unit.replace("ExecStart=/usr/bin/rota ", &format!("ExecStart={ROTA} "));
    assert_ne!(here, unit, "{name}'s ExecStart runs /usr/bin/rota");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join(format!("{name}.service"));
    std::fs::write(&path, here).expect("write the unit");

    let out = analyze
        .arg("verify")
        .arg(&path)
        .output()
        .expect("run systemd-analyze");
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    // A bad value or an unknown key is a warning ("…, ignoring") with exit status 0: any line
    // about this unit is a failure.
    let complaints: Vec<&str> = said.lines().filter(|l| l.contains(name)).collect();
    assert!(
        out.status.success() && complaints.is_empty(),
        "systemd-analyze verify {name} ({}): {said}",
        out.status
    );
}

#[test]
fn systemd_accepts_the_unit() {
    verify_unit(UNIT, "rota-agent");
}

#[test]
fn systemd_accepts_the_fleetlock_unit() {
    verify_unit(FLEETLOCK_UNIT, "rota-fleetlock");
}

/// The `[Service]` settings of the unit at `path` as `key → value`.
fn service_settings(path: &str) -> BTreeMap<String, String> {
    let unit = text(&read(path));
    let mut section = "";
    let mut settings = BTreeMap::new();
    for line in unit.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line;
        } else if section == "[Service]"
            && !line.starts_with('#')
            && let Some((key, value)) = line.split_once('=')
        {
            settings.insert(key.to_owned(), value.to_owned());
        }
    }
    settings
}

#[test]
fn the_unit_restarts_the_agent_spares_its_children_and_waits_for_its_readiness() {
    let settings = service_settings(UNIT);
    for (key, value) in [
        ("Type", "notify"),
        ("Restart", "always"),
        // The README's procedures and the reboot command outlive the agent's stop.
        ("KillMode", "process"),
        ("EnvironmentFile", "-/etc/default/rota-agent"),
        ("ExecStart", "/usr/bin/rota agent $ROTA_AGENT_ARGS"),
        // The default store, sqlite:///var/lib/rota/rota.db, lives there.
        ("StateDirectory", "rota"),
        // The sandboxing that the agent's commands do not feel.
        ("LockPersonality", "yes"),
        ("RestrictRealtime", "yes"),
        ("SystemCallArchitectures", "native"),
    ] {
        assert_eq!(
            settings.get(key).map(String::as_str),
            Some(value),
            "{key}= in {settings:?}"
        );
    }
    assert!(settings.contains_key("WatchdogSec"), "{settings:?}");
    for confining in [
        "ProtectSystem",
        "PrivateTmp",
        "NoNewPrivileges",
        "ProtectHome",
    ] {
        assert!(
            !settings.contains_key(confining),
            "{confining}= would confine the maintenance commands the agent runs"
        );
    }
}

#[test]
fn the_fleetlock_unit_restarts_the_server_and_watches_it() {
    let settings = service_settings(FLEETLOCK_UNIT);
    for (key, value) in [
        // The server sends no READY=1: it is up once it runs.
        ("Type", "exec"),
        ("Restart", "always"),
        ("RestartPreventExitStatus", "2"),
        ("EnvironmentFile", "-/etc/default/rota-fleetlock"),
        ("ExecStart", "/usr/bin/rota fleetlock $ROTA_FLEETLOCK_ARGS"),
        // Its pings come from the server alone, not from the commands it runs.
        ("NotifyAccess", "main"),
        // The default store, sqlite:///var/lib/rota/rota.db, lives there.
        ("StateDirectory", "rota"),
        ("StateDirectoryMode", "0700"),
        ("LockPersonality", "yes"),
        ("RestrictRealtime", "yes"),
        ("SystemCallArchitectures", "native"),
    ] {
        assert_eq!(
            settings.get(key).map(String::as_str),
            Some(value),
            "{key}= in {settings:?}"
        );
    }
    assert!(settings.contains_key("WatchdogSec"), "{settings:?}");
    // A drain stopped with the server runs again when it restarts: its commands stop with it.
    assert!(!settings.contains_key("KillMode"), "{settings:?}");
    for confining in [
        "ProtectSystem",
        "PrivateTmp",
        "NoNewPrivileges",
        "ProtectHome",
    ] {
        assert!(
            !settings.contains_key(confining),
            "{confining}= would confine the drain, uncordon and health commands the server runs"
        );
    }
}

/// The variables an env file sets or shows commented out (`#NAME=value`), with their values.
fn env_variables(path: &str) -> Vec<(String, String)> {
    text(&read(path))
        .lines()
        .map(|l| l.trim_start_matches('#'))
        .filter_map(|l| l.split_once('='))
        .filter(|(name, _)| {
            !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
        })
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect()
}

#[test]
fn every_variable_of_the_fleetlock_env_file_is_one_rota_fleetlock_reads() {
    let help = Command::new(ROTA)
        .args(["fleetlock", "--help"])
        .output()
        .expect("rota fleetlock --help");
    assert!(help.status.success(), "{}", text(&help.stderr));
    let help = text(&help.stdout);
    let variables = env_variables(FLEETLOCK_ENV_FILE);
    assert!(variables.len() >= 5, "{variables:?}");
    for (name, _) in &variables {
        // The unit's ExecStart splits ROTA_FLEETLOCK_ARGS; RUST_LOG and ROTA_LOG_FORMAT are
        // every command's.
        let known = ["ROTA_FLEETLOCK_ARGS", "RUST_LOG", "ROTA_LOG_FORMAT"].contains(&name.as_str())
            || help.contains(&format!("[env: {name}="));
        assert!(known, "{name} is no variable of `rota fleetlock --help`");
    }
}

/// The .deb that scripts/test built with scripts/deb.
fn deb() -> PathBuf {
    let Some(deb) = std::env::var_os("ROTA_TEST_DEB") else {
        panic!(
            "ROTA_TEST_DEB is not set: it names the Debian package to check. scripts/test sets \
             it; by hand: ROTA_TEST_DEB=$(scripts/deb | tail -n 1)"
        );
    };
    let deb = PathBuf::from(deb);
    assert!(deb.is_file(), "ROTA_TEST_DEB={} is no file", deb.display());
    deb
}

fn dpkg_deb(args: &[&str], deb: &Path) -> String {
    let out = Command::new("dpkg-deb")
        .args(args)
        .arg(deb)
        .output()
        .expect("run dpkg-deb");
    assert!(
        out.status.success(),
        "dpkg-deb {args:?}: {}",
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// Whether the ELF file `bytes` names a program interpreter (the dynamic loader): a binary
/// without one needs no libc on the host.
fn has_interpreter(bytes: &[u8]) -> bool {
    const PT_INTERP: u32 = 3;
    let word = |at: usize, n: usize| -> u64 {
        let mut buf = [0u8; 8];
        buf[..n].copy_from_slice(&bytes[at..at + n]);
        u64::from_le_bytes(buf)
    };
    assert_eq!(&bytes[..5], b"\x7fELF\x02", "a 64-bit ELF file");
    let (table, size, count) = (word(0x20, 8), word(0x36, 2), word(0x38, 2));
    (0..count).any(|i| {
        word(usize::try_from(table + i * size).expect("offset"), 4) == u64::from(PT_INTERP)
    })
}

/// The man pages committed in packaging/man/, by file name.
fn man_pages() -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../packaging/man");
    std::fs::read_dir(&dir)
        .expect("packaging/man")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn the_package_holds_the_static_binary_the_units_and_their_conffiles() {
    let deb = deb();
    // "-rwxr-xr-x root/root 123 2024-01-01 00:00 ./usr/bin/rota": files, not directories.
    let files: BTreeMap<String, String> = dpkg_deb(&["-c"], &deb)
        .lines()
        .filter(|l| !l.starts_with('d'))
        .map(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            let path = fields.get(5).expect("a path").trim_start_matches('.');
            // cargo-deb writes numeric owners; other tools write names.
            let owner = fields[1].replace("root", "0");
            (path.to_owned(), format!("{} {owner}", fields[0]))
        })
        .collect();
    let expected: BTreeMap<String, String> = [
        ("/usr/bin/rota", "-rwxr-xr-x 0/0"),
        (
            "/usr/lib/systemd/system/rota-agent.service",
            "-rw-r--r-- 0/0",
        ),
        (
            "/usr/lib/systemd/system/rota-fleetlock.service",
            "-rw-r--r-- 0/0",
        ),
        // Root's only: they may hold the PostgreSQL password.
        ("/etc/default/rota-agent", "-rw------- 0/0"),
        ("/etc/default/rota-fleetlock", "-rw------- 0/0"),
        // Debian's policy: every package says its licence.
        ("/usr/share/doc/rota/copyright", "-rw-r--r-- 0/0"),
    ]
    .into_iter()
    .map(|(p, m)| (p.to_owned(), m.to_owned()))
    // One man page per command, generated into packaging/man/ and gzipped by cargo-deb.
    .chain(man_pages().into_iter().map(|name| {
        (
            format!("/usr/share/man/man1/{name}.gz"),
            "-rw-r--r-- 0/0".to_owned(),
        )
    }))
    .collect();
    assert!(
        expected.contains_key("/usr/share/man/man1/rota-agent.1.gz"),
        "rota agent's man page"
    );
    assert_eq!(files, expected);

    let dir = tempfile::tempdir().expect("tempdir");
    let control = dir.path().join("DEBIAN");
    let status = Command::new("dpkg-deb")
        .arg("-R")
        .arg(&deb)
        .arg(dir.path())
        .status()
        .expect("dpkg-deb -R");
    assert!(status.success(), "dpkg-deb -R");
    let conffiles = text(&read(control.join("conffiles")));
    let mut conffiles: Vec<&str> = conffiles.lines().collect();
    conffiles.sort_unstable();
    assert_eq!(
        conffiles,
        ["/etc/default/rota-agent", "/etc/default/rota-fleetlock"],
        "an upgrade keeps the operator's configuration"
    );
    // Installing enables and starts nothing (the agent's defaults would reboot the host at the
    // next /var/run/reboot-required; the server's would answer hosts before it knows their
    // ids); an upgrade re-enables what was enabled and restarts what runs; removing stops it.
    let postinst = text(&read(control.join("postinst")));
    let prerm = text(&read(control.join("prerm")));
    assert!(
        !postinst.contains("deb-systemd-invoke start")
            && !postinst.contains("deb-systemd-invoke restart"),
        "{postinst}"
    );
    for unit in ["rota-agent.service", "rota-fleetlock.service"] {
        assert!(
            postinst.contains(&format!(
                "if deb-systemd-helper debian-installed {unit}; then"
            )) && postinst.contains(&format!("deb-systemd-invoke try-restart {unit}")),
            "{unit}: {postinst}"
        );
        assert!(
            prerm.contains(&format!("deb-systemd-invoke stop {unit}")),
            "{unit}: {prerm}"
        );
    }
    let unpacked = |p: &str| read(dir.path().join(p.trim_start_matches('/')));
    assert_eq!(
        unpacked("/usr/lib/systemd/system/rota-agent.service"),
        read(UNIT)
    );
    assert_eq!(unpacked("/etc/default/rota-agent"), read(ENV_FILE));
    assert_eq!(
        unpacked("/usr/lib/systemd/system/rota-fleetlock.service"),
        read(FLEETLOCK_UNIT)
    );
    assert_eq!(
        unpacked("/etc/default/rota-fleetlock"),
        read(FLEETLOCK_ENV_FILE)
    );

    let binary = unpacked("/usr/bin/rota");
    assert!(
        has_interpreter(&read(ROTA)),
        "the check tells a dynamic binary (the one under test, linked against glibc)"
    );
    assert!(
        !has_interpreter(&binary),
        "the packaged rota is linked statically"
    );
    let version = Command::new(dir.path().join("usr/bin/rota"))
        .arg("--version")
        .output()
        .expect("run the packaged rota");
    assert!(version.status.success(), "{}", text(&version.stderr));
    assert_eq!(
        text(&version.stdout).trim(),
        format!("rota {}", env!("CARGO_PKG_VERSION"))
    );

    let fields = dpkg_deb(&["-f"], &deb);
    for field in ["Package: rota", "Architecture: amd64"] {
        assert!(fields.lines().any(|l| l == field), "{field}: {fields}");
    }
    // cargo-deb writes the field even when it is empty.
    let depends: Vec<&str> = fields
        .lines()
        .filter_map(|l| {
            l.strip_prefix("Depends:")
                .or(l.strip_prefix("Pre-Depends:"))
        })
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .collect();
    assert!(
        depends.is_empty(),
        "a static binary depends on nothing: {fields}"
    );
}

/// The messages an agent sends to the notify socket it was given, as systemd's would receive
/// them.
struct NotifySocket {
    socket: UnixDatagram,
    received: Vec<String>,
}

impl NotifySocket {
    fn bind(path: &Path) -> NotifySocket {
        let socket = UnixDatagram::bind(path).expect("bind the notify socket");
        socket
            .set_read_timeout(Some(Duration::from_millis(50)))
            .expect("read timeout");
        NotifySocket {
            socket,
            received: Vec::new(),
        }
    }

    /// Receives for `how_long`, or until a message is `until`.
    fn receive(&mut self, how_long: Duration, until: Option<&str>) {
        let start = Instant::now();
        let mut buf = [0u8; 4096];
        while start.elapsed() < how_long {
            match self.socket.recv(&mut buf) {
                Ok(n) => {
                    let message = text(&buf[..n]).trim_end().to_owned();
                    let done = until == Some(message.as_str());
                    self.received.push(message);
                    if done {
                        return;
                    }
                }
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(e) => panic!("receiving on the notify socket: {e}"),
            }
        }
    }

    fn count(&self, message: &str) -> usize {
        self.received.iter().filter(|m| *m == message).count()
    }
}

#[tokio::test]
async fn the_agent_tells_systemd_it_is_ready_once_pings_the_watchdog_and_says_it_stops() {
    let dir = tempfile::tempdir().expect("tempdir");
    for sub in ["root/run", "root/var/run"] {
        std::fs::create_dir_all(dir.path().join(sub)).expect("mkdir");
    }
    std::fs::write(dir.path().join("boot_id"), "boot-1\n").expect("boot id");
    let db = dir.path().join("rota.db");
    let mut notify = NotifySocket::bind(&dir.path().join("notify"));
    let stderr = std::fs::File::create(dir.path().join("agent.log")).expect("log");
    let mut agent = Command::new(ROTA)
        .arg("agent")
        .arg("--store")
        .arg(format!("sqlite://{}", db.display()))
        .args(["--node", "node-a", "--session-ttl", "3s"])
        .arg("--host-root")
        .arg(dir.path().join("root"))
        .arg("--boot-id-file")
        .arg(dir.path().join("boot_id"))
        .env("NOTIFY_SOCKET", dir.path().join("notify"))
        // systemd's WatchdogSec=200ms: a ping every 100 ms.
        .env("WATCHDOG_USEC", "200000")
        .env_remove("WATCHDOG_PID")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("start rota agent");
    let log = || text(&read(dir.path().join("agent.log")));

    notify.receive(PATIENCE, Some("READY=1"));
    assert_eq!(
        notify.count("READY=1"),
        1,
        "{:?}\n{}",
        notify.received,
        log()
    );
    // Ready means the agent's session is open in the store.
    let store = SqliteStore::open(&db).await.expect("open the store");
    let record = store
        .node(&NodeName::new("node-a").expect("name"))
        .await
        .expect("read the node");
    assert!(record.is_some(), "READY=1 before the agent's session");

    // Many store accesses and heartbeats later (every second), still one READY=1.
    notify.receive(Duration::from_secs(3), None);
    assert_eq!(notify.count("READY=1"), 1, "{:?}", notify.received);
    let pings = notify.count("WATCHDOG=1");
    assert!(pings >= 10, "{pings} pings in 3 s: {:?}", notify.received);

    let status = Command::new("kill")
        .args(["-TERM", &agent.id().to_string()])
        .status()
        .expect("kill -TERM");
    assert!(status.success());
    notify.receive(PATIENCE, Some("STOPPING=1"));
    assert_eq!(
        notify.received.last().map(String::as_str),
        Some("STOPPING=1"),
        "{}",
        log()
    );
    let exit = agent.wait().expect("wait for the agent");
    assert!(exit.success(), "{exit}: {}", log());
}

#[tokio::test]
async fn the_fleetlock_server_pings_the_watchdog_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("rota.db");
    let mut notify = NotifySocket::bind(&dir.path().join("notify"));
    let stderr = std::fs::File::create(dir.path().join("server.log")).expect("log");
    // The env file's example flags, split at spaces as the unit's ExecStart splits them.
    let (_, example) = env_variables(FLEETLOCK_ENV_FILE)
        .into_iter()
        .find(|(name, _)| name == "ROTA_FLEETLOCK_ARGS")
        .expect("the env file shows ROTA_FLEETLOCK_ARGS");
    let mut server = Command::new(ROTA)
        .arg("fleetlock")
        .args(example.split_whitespace())
        .env("ROTA_STORE", format!("sqlite://{}", db.display()))
        .env("ROTA_FLEETLOCK_LISTEN", "127.0.0.1:0")
        .env("NOTIFY_SOCKET", dir.path().join("notify"))
        // systemd's WatchdogSec=200ms: a ping every 100 ms.
        .env("WATCHDOG_USEC", "200000")
        .env_remove("WATCHDOG_PID")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("start rota fleetlock");
    let log = || text(&read(dir.path().join("server.log")));

    notify.receive(Duration::from_secs(3), None);
    let pings = notify.count("WATCHDOG=1");
    assert!(
        pings >= 10,
        "{pings} pings in 3 s: {:?}\n{}",
        notify.received,
        log()
    );
    assert_eq!(
        notify.count("READY=1"),
        0,
        "the server tells its readiness now: the unit's Type=exec should become Type=notify"
    );

    // SIGTERM (systemctl stop): the server stops serving and exits 0, and pings no more.
    let status = Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status()
        .expect("kill -TERM");
    assert!(status.success());
    let start = Instant::now();
    let exit = loop {
        if let Some(exit) = server.try_wait().expect("wait for the server") {
            break exit;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "the server still runs {PATIENCE:?} after SIGTERM: {}",
            log()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(exit.success(), "{exit}: {}", log());
    notify.receive(Duration::from_millis(300), None);
    let after = notify.received.len();
    notify.receive(Duration::from_millis(300), None);
    assert_eq!(notify.received.len(), after, "{:?}", notify.received);
    // STOPPING=1 comes once, after the pings, even though the server's serving ends in the
    // same poll as the signal (supervise() looks at the cancel first).
    assert_eq!(notify.count("STOPPING=1"), 1, "{:?}", notify.received);
    assert_eq!(
        notify.received.last().map(String::as_str),
        Some("STOPPING=1")
    );
}
