//! Domain errors as gRPC statuses, in one place: one function per error
//! type, so that a handler never decides a status code itself.

use agentx_shared::folder::NameError;
use tokio::task::JoinError;
use tonic::Status;

use crate::remote::RemoteError;
use crate::search::SearchError;
use crate::snapshot::SnapError;
use crate::snapshot::service::Failure;
use crate::store::StoreError;

/// Store errors: what the caller asked for is missing or wrong, or it
/// changed meanwhile, or agentd's storage failed, or it is going away.
pub fn status_of(e: StoreError) -> Status {
    let message = e.to_string();
    match e {
        StoreError::NotFound(_) => Status::not_found(message),
        StoreError::Invalid(_) => Status::invalid_argument(message),
        StoreError::Moved(_) => Status::failed_precondition(message),
        StoreError::Disk(_)
        | StoreError::Damaged { .. }
        | StoreError::Unreadable(_)
        | StoreError::Encode(_)
        | StoreError::Internal(_)
        | StoreError::Panicked(_) => Status::internal(message),
        StoreError::Closed => Status::unavailable(message),
    }
}

/// Snapshot errors: "off here", "busy" and "no such" are the caller's; a
/// failing store is ours.
pub fn snap_status(e: Failure) -> Status {
    let message = e.to_string();
    match &*e {
        SnapError::Home(_) | SnapError::Busy(_) => Status::failed_precondition(message),
        SnapError::NotFound(_) => Status::not_found(message),
        SnapError::Closed => Status::unavailable(message),
        SnapError::Io(_) | SnapError::Internal(_) => Status::internal(message),
    }
}

/// Search errors: a bad query is the caller's; a rebuilding index answers
/// later; a broken one is ours.
pub fn search_status(e: SearchError) -> Status {
    match e {
        SearchError::Query(m) => Status::invalid_argument(m),
        e @ SearchError::Rebuilding => Status::failed_precondition(e.to_string()),
        other => Status::internal(other.to_string()),
    }
}

/// A name in a request (a conversation or snapshot id) that is no safe
/// file name: the caller's.
pub fn bad_name(e: NameError) -> Status {
    Status::invalid_argument(e.to_string())
}

/// A blocking task of agentd's own failed (it panicked): ours.
pub fn task_failed(e: JoinError) -> Status {
    Status::internal(e.to_string())
}

/// Opening conversation `id`, which this machine does not have, from the
/// remote store failed. "Not found" only when it is not there (or belongs
/// elsewhere, as for a local checkout); a misconfigured remote is a
/// precondition; the server failing is not agentd's own unavailability
/// (to agentx UNAVAILABLE means agentd went away, exit 3), so it aborts.
pub fn opening_remote(id: &str, e: RemoteError) -> Status {
    let failed = |e: RemoteError| {
        format!("conversation {id} is not here, and pulling it from the remote store failed: {e}")
    };
    match e {
        RemoteError::NotFound(m) | RemoteError::WrongScope(m) => Status::not_found(m),
        e @ RemoteError::Config(_) => Status::failed_precondition(failed(e)),
        e @ (RemoteError::Server { .. } | RemoteError::Local(_) | RemoteError::Refused(_)) => {
            Status::aborted(failed(e))
        }
    }
}

#[cfg(test)]
mod tests {
    use tonic::Code;

    use super::*;

    const ID: &str = "0190a1b2c3d-abc123";

    #[test]
    fn store_errors_keep_their_codes_and_messages() {
        let cases = [
            (StoreError::NotFound("no such".into()), Code::NotFound),
            (StoreError::Invalid("bad".into()), Code::InvalidArgument),
            (
                StoreError::Moved("went on".into()),
                Code::FailedPrecondition,
            ),
            (StoreError::Internal("broken"), Code::Internal),
            (StoreError::Panicked("a bug".into()), Code::Internal),
            // agentx reads UNAVAILABLE as "agentd went away" (exit 3).
            (StoreError::Closed, Code::Unavailable),
        ];
        for (e, code) in cases {
            let message = e.to_string();
            let status = status_of(e);
            assert_eq!((status.code(), status.message()), (code, message.as_str()));
        }
    }

    #[test]
    fn a_rebuilding_index_is_a_precondition_and_a_bad_query_the_callers() {
        assert_eq!(
            search_status(SearchError::Rebuilding).code(),
            Code::FailedPrecondition
        );
        let bad = search_status(SearchError::Query("unbalanced quote".into()));
        assert_eq!(bad.code(), Code::InvalidArgument);
        assert_eq!(bad.message(), "unbalanced quote");
        assert_eq!(
            search_status(SearchError::Damaged("x".into())).code(),
            Code::Internal
        );
    }

    #[test]
    fn snapshot_errors_keep_their_codes() {
        let code = |e: SnapError| snap_status(std::sync::Arc::new(e)).code();
        assert_eq!(
            code(SnapError::Busy("a turn".into())),
            Code::FailedPrecondition
        );
        assert_eq!(
            code(SnapError::Home("/home/u".into())),
            Code::FailedPrecondition
        );
        assert_eq!(code(SnapError::NotFound("none".into())), Code::NotFound);
        assert_eq!(code(SnapError::Closed), Code::Unavailable);
    }

    #[test]
    fn a_misconfigured_remote_is_not_reported_as_not_found() {
        let status = opening_remote(ID, RemoteError::Config("remote_url is bad".into()));
        assert_eq!(status.code(), Code::FailedPrecondition);
        assert_eq!(
            status.message(),
            format!(
                "conversation {ID} is not here, and pulling it from the remote store failed: \
                 remote_url is bad"
            )
        );
    }

    #[test]
    fn only_a_missing_or_misplaced_conversation_is_not_found() {
        let missing = opening_remote(ID, RemoteError::NotFound("no conversation".into()));
        assert_eq!(missing.code(), Code::NotFound);
        assert_eq!(missing.message(), "no conversation");
        let elsewhere = opening_remote(ID, RemoteError::WrongScope("belongs to x".into()));
        assert_eq!(elsewhere.code(), Code::NotFound);
        assert_eq!(elsewhere.message(), "belongs to x");
        for failed in [
            RemoteError::server("cannot reach db"),
            RemoteError::local("disk full"),
            RemoteError::Refused("refused".into()),
        ] {
            let status = opening_remote(ID, failed);
            assert_eq!(status.code(), Code::Aborted, "{status:?}");
            assert!(
                status
                    .message()
                    .contains("pulling it from the remote store failed")
            );
        }
    }
}
