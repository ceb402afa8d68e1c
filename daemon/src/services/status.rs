//! Domain errors as gRPC statuses, in one place: one function per error
//! type, so that a handler never decides a status code itself.

use tonic::Status;

use crate::remote::RemoteError;

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
