//! The snapshot actor under load from several folders: a full scan runs off
//! the store's thread, a panic fails one request, abandoned requests never run.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use super::super::service::Snapshots;
use super::*;

fn actor(tmp: &Path) -> Snapshots {
    Snapshots::start(
        tmp.join("checkpoints"),
        tmp.join("config.toml"),
        Arc::default(),
    )
    .unwrap()
}

fn project(tmp: &Path, name: &str, files: usize) -> PathBuf {
    let dir = tmp.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    for i in 0..files {
        std::fs::write(dir.join(format!("f{i}.txt")), format!("{name} {i}\n")).unwrap();
    }
    std::fs::canonicalize(dir).unwrap()
}

/// Snapshots and lists `other` (3 files, never snapshotted) within 10 s,
/// while another folder is held up by `doing`.
async fn other_folder_is_served(snapshots: &Snapshots, other: &Path, doing: &str) {
    let other_work = async {
        let snap = snapshots
            .take(other, owner("b", Phase::Before, "1"))
            .await
            .unwrap();
        let at = other.to_path_buf();
        let listed = snapshots.call(other, move |s| s.list(&at)).await.unwrap();
        (snap, listed)
    };
    let (snap, listed) = tokio::time::timeout(Duration::from_secs(10), other_work)
        .await
        .unwrap_or_else(|_| panic!("another folder was not served while {doing}"));
    assert_eq!(snap.files, 3);
    assert_eq!(listed.len(), 1);
}

/// A request for `folder` started now: it must not finish within 100 ms
/// (the folder is held up by `doing`).
async fn waits_for(
    snapshots: &Snapshots,
    folder: &Path,
    doing: &str,
) -> tokio::task::JoinHandle<Result<usize, super::super::service::Failure>> {
    let at = folder.to_path_buf();
    let counted = {
        let s = snapshots.clone();
        tokio::spawn(async move { s.call(&at.clone(), move |s| s.count(&at)).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !counted.is_finished(),
        "a request for the folder ran before {doing} ended"
    );
    counted
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_folders_first_scan_holds_up_no_other_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let snapshots = actor(tmp.path());
    let big = project(tmp.path(), "big", 3);
    std::fs::write(big.join("hold-the-scan-here.txt"), "x").unwrap();
    let other = project(tmp.path(), "other", 3);
    // Status knew the folder before its first snapshot.
    let before = snapshots
        .standing(&big, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(before.count, 0);
    // The big folder's scan stops at one file until released.
    let (entered_tx, entered) = mpsc::channel::<()>();
    let (release, released) = mpsc::channel::<()>();
    let hook = Mutex::new(Some((entered_tx, released)));
    let hooked = seams::on_file_read(Box::new(move |rel: &[u8]| {
        if rel != b"hold-the-scan-here.txt" {
            return;
        }
        let held = hook.lock().unwrap().take();
        if let Some((entered, released)) = held {
            entered.send(()).unwrap();
            let _ = released.recv_timeout(Duration::from_secs(30));
        }
    }));
    let first = {
        let (s, big) = (snapshots.clone(), big.clone());
        tokio::spawn(async move { s.take(&big, owner("a", Phase::Before, "1")).await })
    };
    tokio::task::spawn_blocking(move || entered.recv_timeout(Duration::from_secs(10)))
        .await
        .unwrap()
        .expect("the big folder's scan reached the held file");

    // Meanwhile another folder is snapshotted and listed.
    other_folder_is_served(&snapshots, &other, "the first scan ran").await;
    // The scanning folder's own requests wait for its scan, and status
    // says what it knows instead of waiting (the other folder's jobs
    // published meanwhile did not make it look idle).
    let standing = snapshots.standing(&big, Duration::from_millis(100)).await;
    assert!(
        standing.as_ref().is_some_and(|s| s.watch.contains("busy")),
        "{standing:?}"
    );
    let counted = waits_for(&snapshots, &big, "its scan").await;

    release.send(()).unwrap();
    drop(hooked);
    let snap = first.await.unwrap().unwrap();
    assert_eq!(snap.files, 4);
    assert_eq!(counted.await.unwrap().unwrap(), 1);
    let standing = snapshots
        .standing(&big, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(standing.count, 1);
    assert!(!standing.watch.contains("busy"), "{}", standing.watch);
}

/// An actor and two folders of two files, `a` snapshotted once.
async fn two_folders_one_snapshot() -> (tempfile::TempDir, Snapshots, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let snapshots = actor(tmp.path());
    let a = project(tmp.path(), "a", 2);
    let b = project(tmp.path(), "b", 2);
    snapshots
        .take(&a, owner("a", Phase::Before, "1"))
        .await
        .unwrap();
    (tmp, snapshots, a, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_fails_only_its_request() {
    let (_tmp, snapshots, a, b) = two_folders_one_snapshot().await;
    let hit = snapshots
        .call(&b, |_| -> Result<(), SnapError> {
            panic!("a bug in a request")
        })
        .await;
    match hit {
        Err(e) => assert!(
            matches!(&*e, SnapError::Internal(_)),
            "expected an internal error, got {e}"
        ),
        Ok(()) => panic!("a panicking request succeeded"),
    }
    // The store was reopened from disk: everything before is still there.
    let at = a.clone();
    assert_eq!(snapshots.call(&a, move |s| s.count(&at)).await.unwrap(), 1);
    let snap = snapshots
        .take(&b, owner("b", Phase::Before, "1"))
        .await
        .unwrap();
    assert_eq!(snap.files, 2);
}

/// Holds the store's thread with a job of `folder` until the sender is
/// used (or 30 s pass); returns once the job has begun.
async fn hold_the_store(
    snapshots: &Snapshots,
    folder: &Path,
) -> (
    mpsc::Sender<()>,
    tokio::task::JoinHandle<Result<(), super::super::service::Failure>>,
) {
    let (release, released) = mpsc::channel::<()>();
    let holding = {
        let (s, at) = (snapshots.clone(), folder.to_path_buf());
        tokio::spawn(async move {
            s.call(&at, move |_| {
                let _ = released.recv_timeout(Duration::from_secs(30));
                Ok(())
            })
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    (release, holding)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_whose_caller_went_away_never_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let snapshots = actor(tmp.path());
    let a = project(tmp.path(), "a", 1);
    // Hold the store's thread.
    let (release, holding) = hold_the_store(&snapshots, &a).await;
    let ran = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&ran);
    let abandoned = snapshots.call(&a, move |_| {
        flag.store(true, Ordering::SeqCst);
        Ok(())
    });
    assert!(
        tokio::time::timeout(Duration::from_millis(50), abandoned)
            .await
            .is_err()
    );
    release.send(()).unwrap();
    holding.await.unwrap().unwrap();
    // A later request runs; the abandoned one, queued before it, did not.
    let at = a.clone();
    snapshots.call(&a, move |s| s.count(&at)).await.unwrap();
    assert!(!ran.load(Ordering::SeqCst), "an abandoned request ran");
}

/// Holds every restore at `file` until released (or panics there, when
/// `panic` is set), while the guard lives; the first time it is reached is
/// sent on `entered`.
fn hold_restores_at(
    file: &'static [u8],
    panic: bool,
) -> (seams::Hooked, mpsc::Receiver<()>, mpsc::Sender<()>) {
    let (entered_tx, entered) = mpsc::channel::<()>();
    let (release, released) = mpsc::channel::<()>();
    let hook = Mutex::new(Some((entered_tx, released)));
    let hooked = seams::on_restored(Box::new(move |rel: &[u8]| {
        if rel != file {
            return;
        }
        if panic {
            panic!("a bug in a restore's writes");
        }
        let held = hook.lock().unwrap().take();
        if let Some((entered, released)) = held {
            entered.send(()).unwrap();
            let _ = released.recv_timeout(Duration::from_secs(30));
        }
    }));
    (hooked, entered, release)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_folders_restore_holds_up_no_other_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let snapshots = actor(tmp.path());
    let big = project(tmp.path(), "restoring", 3);
    std::fs::write(big.join("hold-the-restore-here.txt"), "kept\n").unwrap();
    let other = project(tmp.path(), "other", 3);
    let target = snapshots
        .take(&big, owner("a", Phase::Before, "1"))
        .await
        .unwrap()
        .id;
    for name in ["f0.txt", "f1.txt", "f2.txt", "hold-the-restore-here.txt"] {
        std::fs::write(big.join(name), "changed\n").unwrap();
    }
    let (hooked, entered, release) = hold_restores_at(b"hold-the-restore-here.txt", false);
    let rewinding = {
        let (s, big) = (snapshots.clone(), big.clone());
        tokio::spawn(async move {
            let (at, to) = (big.clone(), RewindTo::Id(target));
            s.restore(&big, move |s| s.begin_rewind(&at, &to)).await
        })
    };
    tokio::task::spawn_blocking(move || entered.recv_timeout(Duration::from_secs(10)))
        .await
        .unwrap()
        .expect("the restore reached the held path");

    // Meanwhile another folder is snapshotted and listed.
    other_folder_is_served(&snapshots, &other, "the restore wrote").await;
    // The restoring folder's own requests wait for it.
    let counted = waits_for(&snapshots, &big, "its restore").await;

    release.send(()).unwrap();
    let report = rewinding.await.unwrap().unwrap();
    drop(hooked);
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(report.applied.len(), 4);
    assert_eq!(
        std::fs::read_to_string(big.join("f1.txt")).unwrap(),
        "restoring 1\n"
    );
    assert_eq!(
        std::fs::read_to_string(big.join("hold-the-restore-here.txt")).unwrap(),
        "kept\n"
    );
    // The snapshot rewound to, then one taken before the restore (the one
    // taken ahead of it, to scan off the store's thread, became it).
    assert_eq!(counted.await.unwrap().unwrap(), 2);
    let at = big.clone();
    let listed = snapshots.call(&big, move |s| s.list(&at)).await.unwrap();
    let labels: Vec<&str> = listed
        .iter()
        .flat_map(|s| s.owners.iter().map(|o| o.label.as_str()))
        .collect();
    assert_eq!(labels.len(), 2, "{labels:?}");
    assert!(
        labels.iter().any(|l| l.starts_with("before rewind to ")),
        "{labels:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_in_a_restores_writes_fails_it_and_its_journal_finishes_it() {
    let tmp = tempfile::tempdir().unwrap();
    let snapshots = actor(tmp.path());
    let folder = project(tmp.path(), "panicking", 2);
    std::fs::write(folder.join("panic-in-the-restore.txt"), "kept\n").unwrap();
    let other = project(tmp.path(), "bystander", 2);
    let target = snapshots
        .take(&folder, owner("a", Phase::Before, "1"))
        .await
        .unwrap()
        .id;
    for name in ["f0.txt", "f1.txt", "panic-in-the-restore.txt"] {
        std::fs::write(folder.join(name), "changed\n").unwrap();
    }
    let (hooked, _, _) = hold_restores_at(b"panic-in-the-restore.txt", true);
    let (at, to) = (folder.clone(), RewindTo::Id(target));
    let hit = snapshots
        .restore(&folder, move |s| s.begin_rewind(&at, &to))
        .await;
    drop(hooked);
    match hit {
        Err(e) => assert!(
            matches!(&*e, SnapError::Internal(c) if c.contains("a bug in a restore")),
            "expected an internal error naming the panic, got {e}"
        ),
        Ok(r) => panic!("a panicking restore succeeded: {r:?}"),
    }
    // Another folder is untouched; the restoring one is usable again, and
    // its journal finished the restore when the folder was next opened.
    let snap = snapshots
        .take(&other, owner("b", Phase::Before, "1"))
        .await
        .unwrap();
    assert_eq!(snap.files, 2);
    let at = folder.clone();
    assert_eq!(
        snapshots
            .call(&folder, move |s| s.count(&at))
            .await
            .unwrap(),
        2
    );
    for (name, want) in [
        ("f0.txt", "panicking 0\n"),
        ("f1.txt", "panicking 1\n"),
        ("panic-in-the-restore.txt", "kept\n"),
    ] {
        assert_eq!(std::fs::read_to_string(folder.join(name)).unwrap(), want);
    }
}

/// Twenty slow jobs queued for one folder, then one for another: the other
/// folder's job runs after at most the first two of them, not after all
/// twenty (folders take turns on the store's thread).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_folder_with_much_queued_work_holds_up_another_by_one_job() {
    let tmp = tempfile::tempdir().unwrap();
    let snapshots = actor(tmp.path());
    let busy = project(tmp.path(), "busy", 1);
    let other = project(tmp.path(), "other", 1);
    let order = Arc::new(Mutex::new(Vec::new()));
    let busy_jobs = futures_util::future::join_all((0..20).map(|i| {
        let order = Arc::clone(&order);
        snapshots.call(&busy, move |_| {
            std::thread::sleep(Duration::from_millis(20));
            order.lock().unwrap().push(format!("busy {i}"));
            Ok(())
        })
    }));
    let mark = Arc::clone(&order);
    let other_job = snapshots.call(&other, move |_| {
        mark.lock().unwrap().push("other".to_owned());
        Ok(())
    });
    // Polled in this order, so sent in this order: the twenty, then the other.
    let (busy_done, other_done) = tokio::join!(busy_jobs, other_job);
    assert!(busy_done.iter().all(Result::is_ok));
    other_done.unwrap();
    let order = order.lock().unwrap().clone();
    let at = order.iter().position(|o| o == "other").unwrap();
    assert!(
        at <= 2,
        "the other folder's job ran after {at} jobs: {order:?}"
    );
    // The busy folder's own jobs kept their order.
    let busy: Vec<String> = order.into_iter().filter(|o| o != "other").collect();
    let expected: Vec<String> = (0..20).map(|i| format!("busy {i}")).collect();
    assert_eq!(busy, expected);
}

/// Status reads a folder's counts as the store's thread published them,
/// without waiting behind another folder's job, and a snapshot's reply
/// leaves only after its count is published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_reads_what_the_store_published_without_waiting_for_it() {
    let (_tmp, snapshots, a, b) = two_folders_one_snapshot().await;
    // First asked: learnt from the store.
    let first = snapshots
        .standing(&a, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(first.count, 1);
    assert!(first.store_bytes > 0);

    // The store's thread is held by a job of another folder.
    let (release, holding) = hold_the_store(&snapshots, &b).await;
    let asked = tokio::time::timeout(
        Duration::from_millis(500),
        snapshots.standing(&a, Duration::from_secs(30)),
    )
    .await
    .expect("status waited for the store's thread")
    .unwrap();
    assert_eq!(asked.count, 1);
    assert!(!asked.watch.contains("busy"), "{}", asked.watch);
    release.send(()).unwrap();
    holding.await.unwrap().unwrap();

    // The next snapshot's count is there as soon as its reply is.
    std::fs::write(a.join("new.txt"), "new\n").unwrap();
    snapshots
        .take(&a, owner("a", Phase::After, "1"))
        .await
        .unwrap();
    let after = snapshots
        .standing(&a, Duration::from_millis(1))
        .await
        .unwrap();
    assert_eq!(after.count, 2, "{after:?}");
}
