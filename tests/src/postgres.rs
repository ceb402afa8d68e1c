//! A throwaway PostgreSQL cluster for the remote-store tests:
//! `initdb` + `pg_ctl` from Debian's `postgresql` package on a free
//! loopback port, its socket in a temp dir, run as the `postgres` user when
//! the tests run as root. [`shared`] starts one per test binary (each test
//! then uses a database of its own) and a watcher process stops it when the
//! binary exits; [`Cluster::start`] gives a test its own (stopped on drop),
//! for tests that stop and restart the server.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

/// The newest PostgreSQL server binaries installed, if any.
pub fn bin_dir() -> Option<PathBuf> {
    let mut dirs: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            (bin.join("initdb").is_file() && bin.join("pg_ctl").is_file()).then_some((version, bin))
        })
        .collect();
    dirs.sort();
    dirs.pop().map(|(_, bin)| bin)
}

pub struct Cluster {
    dir: Option<tempfile::TempDir>,
    root: PathBuf,
    bin: PathBuf,
    pub port: u16,
}

impl Cluster {
    /// A fresh cluster, started. `None` (after a visible skip) when the
    /// server binaries are not installed.
    pub fn start() -> Option<Cluster> {
        let Some(bin) = bin_dir() else {
            crate::skip(
                "PostgreSQL server binaries not found under /usr/lib/postgresql (apt-get install postgresql)",
            );
            return None;
        };
        let dir = tempfile::Builder::new()
            .prefix("agentx-pg-")
            .tempdir()
            .unwrap();
        let root = dir.path().to_path_buf();
        std::fs::create_dir(root.join("sock")).unwrap();
        if crate::is_root() {
            let user = nix::unistd::User::from_name("postgres")
                .unwrap()
                .expect("the postgresql package creates the postgres user");
            for p in [root.clone(), root.join("sock")] {
                nix::unistd::chown(&p, Some(user.uid), Some(user.gid)).unwrap();
            }
            std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o700)).unwrap();
        }
        let cluster = Cluster {
            dir: Some(dir),
            root,
            bin,
            port: free_port(),
        };
        let out = cluster.run(
            "initdb",
            &[
                "-D",
                &cluster.data().display().to_string(),
                "-A",
                "trust",
                "-U",
                "agentx",
                "--no-sync",
            ],
        );
        assert!(
            out.status.success(),
            "initdb failed: {}",
            crate::stderr(&out)
        );
        cluster.start_server();
        Some(cluster)
    }

    fn data(&self) -> PathBuf {
        self.root.join("data")
    }

    fn run(&self, tool: &str, args: &[&str]) -> Output {
        let program = self.bin.join(tool);
        let mut cmd = if crate::is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&program);
            c
        } else {
            Command::new(&program)
        };
        cmd.args(args)
            .current_dir(&self.root)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    fn start_server(&self) {
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=60",
            self.port,
            self.root.join("sock").display()
        );
        let out = self.run(
            "pg_ctl",
            &[
                "-D",
                &self.data().display().to_string(),
                "-o",
                &opts,
                "-l",
                &self.root.join("log").display().to_string(),
                "-w",
                "start",
            ],
        );
        assert!(
            out.status.success(),
            "pg_ctl start failed: {}{}",
            crate::stdout(&out),
            std::fs::read_to_string(self.root.join("log")).unwrap_or_default()
        );
    }

    /// Stops the server (`-m fast`).
    pub fn stop(&self) {
        let data = self.data().display().to_string();
        let out = self.run("pg_ctl", &["-D", &data, "-m", "fast", "-w", "stop"]);
        assert!(
            out.status.success(),
            "pg_ctl stop failed: {}",
            crate::stderr(&out)
        );
    }

    /// Starts it again on the same port.
    pub fn restart(&self) {
        self.start_server();
    }

    /// A URL for database `db` as the `agentx` superuser.
    pub fn url(&self, db: &str) -> String {
        format!("postgresql://agentx@127.0.0.1:{}/{db}", self.port)
    }

    /// A login role `user` with `password` (SCRAM) owning a new database
    /// `db`, which only password authentication admits over TCP: its
    /// `pg_hba.conf` line goes before the cluster's `trust` ones.
    pub fn add_password_role(&self, user: &str, password: &str, db: &str) {
        self.execute(
            "postgres",
            &format!(
                "SET password_encryption = 'scram-sha-256';
                 CREATE ROLE \"{user}\" LOGIN PASSWORD '{password}'"
            ),
        );
        self.execute(
            "postgres",
            &format!("CREATE DATABASE \"{db}\" OWNER \"{user}\""),
        );
        self.prepend_hba(&format!("host all {user} 127.0.0.1/32 scram-sha-256"));
    }

    /// Puts `line` first in `pg_hba.conf` (first match wins) and reloads.
    pub fn prepend_hba(&self, line: &str) {
        let hba = self.data().join("pg_hba.conf");
        let old = std::fs::read_to_string(&hba).unwrap();
        std::fs::write(&hba, format!("{line}\n{old}")).unwrap();
        self.reload();
    }

    /// Turns TLS on with a certificate for `localhost` and `127.0.0.1`
    /// signed by a new CA (openssl); returns the CA's PEM file.
    pub fn enable_tls(&self) -> PathBuf {
        let dir = self.root.join("tls");
        std::fs::create_dir_all(&dir).unwrap();
        make_ca(&dir);
        make_server_certificate(&dir);
        std::fs::set_permissions(
            dir.join("server.key"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        if crate::is_root() {
            let user = nix::unistd::User::from_name("postgres").unwrap().unwrap();
            for f in ["", "server.key", "server.pem"] {
                nix::unistd::chown(&dir.join(f), Some(user.uid), Some(user.gid)).unwrap();
            }
        }
        for (name, value) in [
            (
                "ssl_cert_file",
                dir.join("server.pem").display().to_string(),
            ),
            ("ssl_key_file", dir.join("server.key").display().to_string()),
            ("ssl", "on".to_owned()),
        ] {
            self.execute("postgres", &format!("ALTER SYSTEM SET {name} = '{value}'"));
        }
        self.reload();
        dir.join("ca.pem")
    }

    /// Makes the server re-read its configuration (`pg_ctl reload`) and
    /// waits until new connections see it (the postmaster reloads on
    /// SIGHUP, asynchronously; `pg_conf_load_time` moves when it did).
    pub fn reload(&self) {
        let loaded = |c: &Cluster| -> String {
            c.query("postgres", "SELECT pg_conf_load_time()::text")[0].get(0)
        };
        let before = loaded(self);
        let data = self.data().display().to_string();
        let out = self.run("pg_ctl", &["-D", &data, "reload"]);
        assert!(
            out.status.success(),
            "pg_ctl reload failed: {}",
            crate::stderr(&out)
        );
        let mut tries = 0;
        while loaded(self) == before {
            tries += 1;
            assert!(tries < 1000, "the server did not reload its configuration");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    /// Creates database `db` (each test uses its own).
    pub fn create_db(&self, db: &str) {
        self.execute("postgres", &format!("CREATE DATABASE \"{db}\""));
    }

    /// Creates database `db`; its URL, as agentd is given it.
    pub fn new_db(&self, db: &str) -> String {
        self.create_db(db);
        self.url(db)
    }

    /// The harness's own connections go through the Unix socket, so that
    /// `pg_hba.conf` rules for TCP (what agentd uses) never lock it out.
    fn admin_url(&self, db: &str) -> String {
        let sock = self
            .root
            .join("sock")
            .display()
            .to_string()
            .replace('/', "%2F");
        format!("postgresql://agentx@{sock}:{}/{db}", self.port)
    }

    pub fn execute(&self, db: &str, sql: &str) {
        let url = self.admin_url(db);
        let sql = sql.to_owned();
        runtime().block_on(async move {
            let client = connect(&url).await;
            client.batch_execute(&sql).await.unwrap();
        });
    }

    /// Rows of `sql` in `db`.
    pub fn query(&self, db: &str, sql: &str) -> Vec<tokio_postgres::Row> {
        let url = self.admin_url(db);
        let sql = sql.to_owned();
        runtime().block_on(async move {
            let client = connect(&url).await;
            client.query(&sql, &[]).await.unwrap()
        })
    }

    /// The first column of the first row of `sql`, as i64.
    pub fn count(&self, db: &str, sql: &str) -> i64 {
        self.query(db, sql)[0].get(0)
    }

    fn stop_command(&self) -> String {
        let pg_ctl = self.bin.join("pg_ctl");
        let data = self.data();
        let prefix = if crate::is_root() {
            "runuser -u postgres -- "
        } else {
            ""
        };
        format!(
            "{prefix}{} -D {} -m fast stop",
            pg_ctl.display(),
            data.display()
        )
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if self.dir.is_some() {
            let data = self.data().display().to_string();
            let _ = self.run("pg_ctl", &["-D", &data, "-m", "fast", "stop"]);
        }
    }
}

/// The test binary's cluster, started on first use and stopped by a
/// watcher process when the binary exits (statics are never dropped).
pub fn shared() -> Option<&'static Cluster> {
    static SHARED: OnceLock<Option<Cluster>> = OnceLock::new();
    SHARED
        .get_or_init(|| {
            let mut cluster = Cluster::start()?;
            let script = format!(
                "while kill -0 {pid} 2>/dev/null; do sleep 0.3; done; {stop} >/dev/null 2>&1; rm -rf {root}",
                pid = std::process::id(),
                stop = cluster.stop_command(),
                root = cluster.root.display(),
            );
            // The watcher removes the directory; Drop (never run for a
            // static) must not.
            if let Some(dir) = cluster.dir.take() {
                let _ = dir.keep();
            }
            // It outlives this process on purpose (it stops the cluster
            // after we exit); init reaps it.
            #[allow(clippy::zombie_processes)]
            let _watcher = Command::new("sh")
                .args(["-c", &script])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            Some(cluster)
        })
        .as_ref()
        .or_else(|| {
            crate::skip("PostgreSQL server binaries not found (apt-get install postgresql)");
            None
        })
}

/// Runs `openssl` in `dir`; panics when it fails.
fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .expect("openssl is installed");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        crate::stderr(&out)
    );
}

/// A self-signed test CA in `dir`: `ca.key` and `ca.pem`.
fn make_ca(dir: &Path) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=agentx test CA",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
    );
}

/// `server.key` and `server.pem` in `dir`: a server certificate for
/// `localhost` and `127.0.0.1` signed by the CA there.
fn make_server_certificate(dir: &Path) {
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=localhost",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
        ],
    );
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "ext.cnf",
            "-out",
            "server.pem",
        ],
    );
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

/// Makes `folder` a git work tree whose `origin` is `url` (`git init`
/// when git is installed, else the two files agentd reads).
pub fn git_repo(folder: &Path, url: &str) {
    let git = Command::new("git")
        .args(["init", "-q"])
        .current_dir(folder)
        .status()
        .is_ok_and(|s| s.success())
        && Command::new("git")
            .args(["remote", "add", "origin", url])
            .current_dir(folder)
            .status()
            .is_ok_and(|s| s.success());
    if !git {
        std::fs::create_dir_all(folder.join(".git")).unwrap();
        std::fs::write(folder.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(
            folder.join(".git/config"),
            format!("[remote \"origin\"]\n\turl = {url}\n"),
        )
        .unwrap();
    }
}

/// A profile ("machine") whose folder is a clone of `origin`, keeping
/// conversations at `url` under the machine name `name`.
pub fn machine(name: &str, origin: &str, url: &str) -> crate::TestEnv {
    let mut env = crate::TestEnv::new();
    git_repo(&env.work, origin);
    env.extra_env.push(("AGENTX_REMOTE_URL".into(), url.into()));
    env.extra_env.push(("AGENTX_MACHINE".into(), name.into()));
    env
}

/// The records of conversation `id` on the server in `db`: (count,
/// distinct sequence numbers, max sequence number + 1).
pub fn records(pg: &Cluster, db: &str, id: &str) -> (i64, i64, i64) {
    let row = &pg.query(
        db,
        &format!(
            "SELECT count(*), count(DISTINCT seq), coalesce(max(seq) + 1, 0) \
             FROM records WHERE conversation_id = '{id}'"
        ),
    )[0];
    (row.get(0), row.get(1), row.get(2))
}

/// The texts of conversation `id`'s records on the server in `db`, in order.
pub fn texts(pg: &Cluster, db: &str, id: &str) -> Vec<String> {
    pg.query(
        db,
        &format!("SELECT item->>'text' FROM records WHERE conversation_id = '{id}' ORDER BY seq"),
    )
    .iter()
    .filter_map(|r| r.get::<_, Option<String>>(0))
    .collect()
}

/// What the user said in conversation `id` on the server in `db` (the fake
/// model's answers, `echo: …`, left out), in order.
pub fn said(pg: &Cluster, db: &str, id: &str) -> Vec<String> {
    texts(pg, db, id)
        .into_iter()
        .filter(|t| !t.starts_with("echo"))
        .collect()
}

/// Runs `first` in a transaction on `url`, then waits until told to run
/// `then` (which ends the transaction).
pub fn transaction_in_two_steps(
    url: String,
    first: &'static str,
    then: String,
) -> (std::sync::mpsc::Sender<()>, std::thread::JoinHandle<()>) {
    let (go, wait) = std::sync::mpsc::channel::<()>();
    let (ready_tx, ready) = std::sync::mpsc::channel::<()>();
    let holder = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .unwrap();
            tokio::spawn(connection);
            client.batch_execute(first).await.unwrap();
            ready_tx.send(()).unwrap();
            tokio::task::spawn_blocking(move || wait.recv())
                .await
                .unwrap()
                .unwrap();
            client.batch_execute(&then).await.unwrap();
        });
    });
    ready.recv().unwrap();
    (go, holder)
}

/// Holds an exclusive lock on the records table until told to let go.
pub fn lock_records(url: String) -> (std::sync::mpsc::Sender<()>, std::thread::JoinHandle<()>) {
    transaction_in_two_steps(
        url,
        "BEGIN; LOCK TABLE records IN ACCESS EXCLUSIVE MODE",
        "ROLLBACK".to_owned(),
    )
}
