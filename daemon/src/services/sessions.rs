//! The `Sessions` gRPC service: list, open, status, clear and the local
//! shell transcript, answered by the folder's group actor.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use agentx_shared::proto::Location;
use agentx_shared::proto::sessions_server::Sessions;
use agentx_shared::proto::{
    AppendShellTranscriptRequest, Checkpoint, ClearSessionReply, ClearSessionRequest, Exchange,
    FailedResponse, GetStatusRequest, ListCheckpointsReply, ListCheckpointsRequest,
    ListSessionsReply, ListSessionsRequest, OpenSessionReply, OpenSessionRequest, PendingToolCall,
    ProviderSettings, RemoteFork, RollbackReply, RollbackRequest, SessionStatus, SessionSummary,
    SetApproveAllRequest, SetModelRequest, SyncRemoteReply, SyncRemoteRequest, Timestamp,
    open_session_request::Target, rollback_request,
};

use super::{group_for, session_arg, status_of, summary};
use crate::remote::Remote;
use crate::remote::clear::Deleted;
use crate::snapshot::service::Snapshots;
use crate::store::conversation::ShellRun;
use crate::store::conversation::{ConversationDoc, Marker};
use crate::store::{
    Change, OpenTarget, Recent, RollbackTarget, SettingsChange, ShellChange, Store, Update,
};

/// How long status waits for the snapshot store before saying what it knew.
const STATUS_PATIENCE: std::time::Duration = std::time::Duration::from_millis(250);

pub struct SessionsService {
    store: Arc<Store>,
    snapshots: Snapshots,
    remote: Option<Arc<Remote>>,
    engine: Arc<crate::turn::Engine>,
    search: Option<Arc<crate::search::SearchIndex>>,
    /// This machine's name, as the remote store knows it (the remote's
    /// own when it is on).
    machine: String,
}

impl SessionsService {
    pub fn new(
        store: Arc<Store>,
        snapshots: Snapshots,
        remote: Option<Arc<Remote>>,
        engine: Arc<crate::turn::Engine>,
        search: Option<Arc<crate::search::SearchIndex>>,
        machine: String,
    ) -> Self {
        Self {
            store,
            snapshots,
            remote,
            engine,
            search,
            machine,
        }
    }

    /// The conversation's model, provider and context meter, as the
    /// client's settings make them.
    async fn add_standing(
        &self,
        status: &mut SessionStatus,
        group: &crate::store::GroupHandle,
        doc: &ConversationDoc,
        provider: Option<&ProviderSettings>,
        folder: &std::path::Path,
    ) {
        let prefs = super::prefs_of(provider);
        let settings = crate::turn::provider::Settings {
            kind: match provider.map(|p| p.provider.as_str()) {
                Some("chat") => crate::turn::provider::Kind::Chat,
                _ => crate::turn::provider::Kind::Responses,
            },
            base_url: provider
                .map_or_else(String::new, |p| p.base_url.trim_end_matches('/').to_owned()),
            model: provider.map_or_else(String::new, |p| p.model.clone()),
            api_key: None,
        };
        let standing =
            crate::turn::meter::standing(&self.engine, group, doc, &settings, &prefs, folder).await;
        status.model = standing.model;
        status.provider = match settings.kind {
            crate::turn::provider::Kind::Chat => "chat".into(),
            crate::turn::provider::Kind::Responses => "responses".into(),
        };
        status.context = Some((&standing.meter).into());
        status.instruction_files = standing
            .instruction_files
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        status.instruction_files_skipped = standing.instruction_files_skipped;
        status.conversation_model = doc.model.clone().unwrap_or_default();
    }

    fn remote_state(&self) -> agentx_shared::proto::RemoteState {
        super::remote_state(self.remote.as_deref())
    }

    /// Local conversations merged with the remote's for this project and
    /// agent (bounded wait): each marked local, remote or both, newest
    /// first. On a timeout or error: local only, and one line saying so.
    async fn merge_remote(
        &self,
        remote: &Remote,
        folder: &str,
        agent: &str,
        local: Vec<SessionSummary>,
    ) -> (Vec<SessionSummary>, String, u64) {
        let mut local = local;
        for s in &mut local {
            s.location = Location::Local as i32;
            s.machine = remote.machine().to_owned();
        }
        // This machine's conversations in other checkouts of the project
        // are local too (listed with their folder), never "remote".
        let elsewhere =
            super::checkouts::listed_elsewhere(&self.store, remote, folder, agent).await;
        let elsewhere_ids: std::collections::HashSet<String> =
            elsewhere.iter().map(|s| s.id.clone()).collect();
        if !elsewhere.is_empty() {
            local.extend(elsewhere);
            local.sort_by_key(|s| std::cmp::Reverse(s.updated_at.map_or(0, |t| t.unix_ms)));
        }
        let project = crate::remote::project_key(std::path::Path::new(folder), remote.machine());
        let listed = match tokio::time::timeout(remote.list_wait(), remote.list(&project, agent))
            .await
        {
            Ok(Ok(listed)) => listed,
            Ok(Err(e)) => {
                return (
                    local,
                    format!(
                        "the remote store was not reached ({e}); showing this machine's conversations only"
                    ),
                    0,
                );
            }
            Err(_) => {
                return (
                    local,
                    format!(
                        "the remote store was not reached within {} ms; showing this machine's conversations only",
                        remote.list_wait().as_millis()
                    ),
                    0,
                );
            }
        };
        let mut merged = local;
        for row in listed.rows {
            if elsewhere_ids.contains(&row.id) {
                continue;
            }
            if let Some(s) = merged.iter_mut().find(|s| s.id == row.id) {
                s.location = Location::Both as i32;
                s.machine = row.machine;
                continue;
            }
            merged.push(SessionSummary {
                id: row.id,
                title: row.title,
                folder: row.folder,
                agent: agent.to_owned(),
                created_at: Some(Timestamp {
                    unix_ms: row.created_at,
                }),
                updated_at: Some(Timestamp {
                    unix_ms: row.updated_at,
                }),
                turns: row.turns,
                forked_from: None,
                location: Location::Remote as i32,
                machine: row.machine,
                model: String::new(),
            });
        }
        merged.sort_by_key(|s| std::cmp::Reverse(s.updated_at.map_or(0, |t| t.unix_ms)));
        (merged, listed.notes.join("; "), listed.more)
    }
}

impl SessionsService {
    /// Opening a conversation this machine does not have: when the remote
    /// store keeps it (same project and agent), it is pulled here first.
    async fn open_remote(
        &self,
        group: &crate::store::GroupHandle,
        scope: Option<&agentx_shared::proto::Scope>,
        id: &str,
        not_here: String,
    ) -> Result<crate::store::Opened, Status> {
        let Some(remote) = &self.remote else {
            return Err(Status::not_found(not_here));
        };
        let scope = super::Scope::try_from(scope)?;
        crate::remote::pull::open_remote(
            remote,
            &self.store,
            group,
            &scope.folder,
            &scope.agent,
            id,
        )
        .await
        .map_err(|e| super::status::opening_remote(id, e))?;
        group
            .open(OpenTarget::Id(id.to_owned()))
            .await
            .map_err(status_of)
    }
}

/// Largest `!command` transcript kept between two messages.
const MAX_SHELL_TRANSCRIPT: usize = 64 * 1024;

fn marker(m: &Marker) -> FailedResponse {
    FailedResponse {
        message: m.message.clone(),
        at: Some(Timestamp { unix_ms: m.at }),
        retryable: m.retryable,
        resendable: false,
    }
}

/// A failed turn's marker, saying whether a retry has anything to send (as
/// the turn engine's retry decides: unsent items or unanswered calls).
fn failed_marker(m: &Marker, doc: &crate::store::conversation::ConversationDoc) -> FailedResponse {
    FailedResponse {
        resendable: !doc.unsent.is_empty() || !doc.pending_calls.is_empty(),
        ..marker(m)
    }
}

fn checkpoint(index: usize, cp: &crate::store::conversation::Checkpoint) -> Checkpoint {
    Checkpoint {
        index: u32::try_from(index).unwrap_or(u32::MAX),
        response_id: cp.response_id.clone().unwrap_or_default(),
        created_at: Some(Timestamp {
            unix_ms: cp.created_at,
        }),
        last_user_message: cp.last_user.clone(),
        last_assistant_message: cp.last_assistant.clone(),
        usage: Some(cp.usage.into()),
        transcript_len: cp.journal_items,
        id: cp.id(),
        note: cp.note.clone().unwrap_or_default(),
    }
}

/// Longest message text an answer to agentx carries (gRPC's default limit
/// is 4 MiB for the whole message): longer ones are shown by their head.
const SHOWN_TEXT: usize = 64 << 10;

/// A pending call as shown: long arguments and output by their head.
fn shown_call(call: &agentx_shared::conversation::PendingCall) -> PendingToolCall {
    let mut shown: PendingToolCall = call.into();
    shown.arguments = crate::turn::head(&shown.arguments, SHOWN_TEXT);
    shown.output = crate::turn::head(&shown.output, SHOWN_TEXT);
    shown
}

pub fn session_status(doc: Option<&ConversationDoc>) -> SessionStatus {
    let Some(doc) = doc else {
        return SessionStatus::default();
    };
    SessionStatus {
        checkpoints: u32::try_from(doc.checkpoints.len()).unwrap_or(u32::MAX),
        failed: doc.failed.as_ref().map(|m| failed_marker(m, doc)),
        interrupted: doc.interrupted.as_ref().map(marker),
        has_rollback_backup: doc.rollback.is_some(),
        rollback_backup_at: doc.rollback.as_ref().map(|b| Timestamp { unix_ms: b.at }),
        session_id: doc.id.clone(),
        response_id: doc.response_id.clone().unwrap_or_default(),
        usage: Some(doc.usage.into()),
        pending_tool_calls: doc.pending_calls.iter().map(shown_call).collect(),
        turns: doc.turns,
        transcript_items: u32::try_from(doc.journal_items).unwrap_or(u32::MAX),
        has_pending_shell_transcript: !doc.pending_shell.is_empty()
            || !doc.pending_shell_runs.is_empty(),
        folder: doc.folder.clone(),
        agent: doc.agent.clone(),
        title: doc.title.clone(),
        last_user_message: crate::turn::head(&doc.last_user, SHOWN_TEXT),
        last_assistant_message: crate::turn::head(&doc.last_assistant, SHOWN_TEXT),
        cut_short: doc.cut_short.as_ref().map(marker),
        approve_all: doc.approve_all,
        ..SessionStatus::default()
    }
}

#[tonic::async_trait]
impl Sessions for SessionsService {
    async fn list_sessions(
        &self,
        request: Request<ListSessionsRequest>,
    ) -> Result<Response<ListSessionsReply>, Status> {
        let req = request.into_inner();
        let (group, folder) = group_for(&self.store, req.scope.as_ref()).await?;
        let docs = group.list().await.map_err(status_of)?;
        let local: Vec<SessionSummary> = docs.iter().map(summary).collect();
        let (sessions, remote_note, remote_more) = match (&self.remote, req.include_remote) {
            (Some(remote), true) => {
                let agent = super::Scope::try_from(req.scope.as_ref())?.agent;
                self.merge_remote(remote, &folder, &agent, local).await
            }
            _ => (local, String::new(), 0),
        };
        let total = sessions.len() as u64;
        let limit = match req.limit {
            0 => usize::MAX,
            n => n as usize,
        };
        let sessions = sessions
            .into_iter()
            .skip(req.offset as usize)
            .take(limit)
            .collect();
        Ok(Response::new(ListSessionsReply {
            sessions,
            remote_note,
            remote_more,
            total,
        }))
    }

    async fn open_session(
        &self,
        request: Request<OpenSessionRequest>,
    ) -> Result<Response<OpenSessionReply>, Status> {
        let client = crate::peer::pid_of(&request);
        let req = request.into_inner();
        let (group, _) = group_for(&self.store, req.scope.as_ref()).await?;
        let target = match req.target {
            None | Some(Target::Latest(_)) => OpenTarget::Latest,
            Some(Target::New(_)) => OpenTarget::New,
            Some(Target::Index(0)) => {
                return Err(Status::invalid_argument(
                    "conversation numbers start at 1 (the newest)",
                ));
            }
            Some(Target::Index(n)) => OpenTarget::Index(n),
            Some(Target::Id(id)) => OpenTarget::Id(
                session_arg(&id)?.ok_or_else(|| Status::invalid_argument("empty id"))?,
            ),
        };
        let wanted = match &target {
            OpenTarget::Id(id) => Some(id.clone()),
            _ => None,
        };
        let opened = match (group.open_for(target, client).await, wanted) {
            (Err(crate::store::StoreError::NotFound(why)), Some(id)) => {
                // One id lives in one folder per profile: kept in another
                // checkout, it is forked here, never pulled a second time.
                let scope = super::Scope::try_from(req.scope.as_ref())?;
                match super::checkouts::open_elsewhere(
                    &self.store,
                    &self.machine,
                    &group,
                    &scope.folder,
                    &scope.agent,
                    &id,
                )
                .await?
                {
                    Some(opened) => opened,
                    None => {
                        self.open_remote(&group, req.scope.as_ref(), &id, why)
                            .await?
                    }
                }
            }
            (other, _) => other.map_err(status_of)?,
        };
        if let Some(remote) = &self.remote {
            crate::remote::pull::opened(remote, &opened.doc.id);
        }
        Ok(Response::new(OpenSessionReply {
            session: Some(summary(&opened.doc)),
            recent: opened
                .recent
                .into_iter()
                .map(|entry| match entry {
                    Recent::Exchange { user, assistant } => Exchange {
                        user: crate::turn::head(&user, SHOWN_TEXT),
                        assistant: crate::turn::head(&assistant, SHOWN_TEXT),
                        boundary: String::new(),
                    },
                    Recent::Compacted(line) => Exchange {
                        boundary: line,
                        ..Exchange::default()
                    },
                })
                .collect(),
            notices: opened.notices,
            pending_tool_calls: opened.doc.pending_calls.iter().map(shown_call).collect(),
            failed: opened
                .doc
                .failed
                .as_ref()
                .map(|m| failed_marker(m, &opened.doc)),
            interrupted: opened.doc.interrupted.as_ref().map(marker),
        }))
    }

    async fn get_status(
        &self,
        request: Request<GetStatusRequest>,
    ) -> Result<Response<SessionStatus>, Status> {
        let req = request.into_inner();
        let (group, folder) = group_for(&self.store, req.scope.as_ref()).await?;
        // Not behind another request of the folder (a turn's commit and
        // its fsyncs): status says what the last finished one left.
        let doc = group
            .peek(session_arg(&req.session_id)?)
            .await
            .map_err(status_of)?;
        let mut status = session_status(doc.as_ref());
        let folder = std::path::PathBuf::from(folder);
        if let Some(doc) = &doc {
            self.add_standing(&mut status, &group, doc, req.provider.as_ref(), &folder)
                .await;
        }
        // Snapshots are off in the home folder: report none, not an error.
        // Status never waits long on the snapshot store (a restore or the
        // folder's first scan may hold it): it says what it knows.
        if let Some(known) = self.snapshots.standing(&folder, STATUS_PATIENCE).await {
            status.snapshots = u32::try_from(known.count).unwrap_or(u32::MAX);
            status.snapshot_store_bytes = known.store_bytes;
            status.snapshot_watch = known.watch;
        }
        status.remote = Some(self.remote_state());
        status.remote_copy = self
            .remote
            .as_ref()
            .is_some_and(|r| crate::remote::pull::has_copy(r, &status.session_id));
        Ok(Response::new(status))
    }

    async fn clear_session(
        &self,
        request: Request<ClearSessionRequest>,
    ) -> Result<Response<ClearSessionReply>, Status> {
        let req = request.into_inner();
        let (group, folder) = group_for(&self.store, req.scope.as_ref()).await?;
        let agent = super::Scope::try_from(req.scope.as_ref())?.agent;
        let session = session_arg(&req.session_id)?;
        let cleared = group.get(session.clone()).await.map_err(status_of)?;
        let fresh = group.clear(session).await.map_err(status_of)?;
        if let Some(doc) = &cleared {
            if let Some(search) = &self.search {
                search
                    .forget(&self.store.group_dir(&folder, &agent), &doc.id)
                    .await;
            }
            let (folder, id) = (std::path::PathBuf::from(&folder), doc.id.clone());
            if let Err(e) = self
                .snapshots
                .call(&folder.clone(), move |s| {
                    s.forget_conversation(&folder, &id)
                })
                .await
            {
                tracing::debug!("no snapshot labels to forget: {e}");
            }
        }
        let (remote, remote_note) = match (&self.remote, cleared) {
            (Some(r), Some(doc)) => match crate::remote::clear::delete(r, &doc.id).await {
                Deleted::NoCopy => (String::new(), String::new()),
                Deleted::Done => ("deleted".to_owned(), String::new()),
                Deleted::Later(why) => ("later".to_owned(), why),
            },
            _ => (String::new(), String::new()),
        };
        Ok(Response::new(ClearSessionReply {
            session: Some(summary(&fresh)),
            remote,
            remote_note,
        }))
    }

    async fn list_checkpoints(
        &self,
        request: Request<ListCheckpointsRequest>,
    ) -> Result<Response<ListCheckpointsReply>, Status> {
        let req = request.into_inner();
        let (group, _) = group_for(&self.store, req.scope.as_ref()).await?;
        let (cps, head) = group
            .checkpoints(session_arg(&req.session_id)?)
            .await
            .map_err(status_of)?;
        // Newest first, numbered from 1.
        let checkpoints = cps
            .iter()
            .rev()
            .enumerate()
            .map(|(i, cp)| checkpoint(i + 1, cp))
            .collect();
        Ok(Response::new(ListCheckpointsReply { checkpoints, head }))
    }

    async fn rollback(
        &self,
        request: Request<RollbackRequest>,
    ) -> Result<Response<RollbackReply>, Status> {
        let req = request.into_inner();
        let (group, _) = group_for(&self.store, req.scope.as_ref()).await?;
        let target = match req.target {
            None => RollbackTarget::Index(1),
            Some(rollback_request::Target::Index(n)) => RollbackTarget::Index(n),
            Some(rollback_request::Target::Undo(_)) => RollbackTarget::Undo,
            Some(rollback_request::Target::CheckpointId(id)) => RollbackTarget::Id(id),
        };
        let expect = crate::store::Expect {
            head: Some(req.expect_head).filter(|h| !h.is_empty()),
            unchanged_since: Some(req.unchanged_since_ms).filter(|t| *t > 0),
        };
        let doc = group
            .rollback(session_arg(&req.session_id)?, target, expect)
            .await
            .map_err(status_of)?;
        Ok(Response::new(RollbackReply {
            status: Some(session_status(Some(&doc))),
        }))
    }

    async fn append_shell_transcript(
        &self,
        request: Request<AppendShellTranscriptRequest>,
    ) -> Result<Response<SessionStatus>, Status> {
        let req = request.into_inner();
        let (group, _) = group_for(&self.store, req.scope.as_ref()).await?;
        let id = session_arg(&req.session_id)?
            .ok_or_else(|| Status::invalid_argument("a session id is required"))?;
        let current = group
            .get(Some(id.clone()))
            .await
            .map_err(status_of)?
            .map(|d| {
                d.pending_shell.len()
                    + d.pending_shell_runs
                        .iter()
                        .map(|r| r.text.len())
                        .sum::<usize>()
            })
            .unwrap_or(0);
        if current + req.transcript.len() > MAX_SHELL_TRANSCRIPT {
            return Err(Status::resource_exhausted(format!(
                "the local shell transcript would exceed {} KiB; send a message first",
                MAX_SHELL_TRANSCRIPT / 1024
            )));
        }
        let doc = group
            .commit(
                &id,
                match crate::store::conversation::process_start(req.client_pid) {
                    Some(started) if req.client_pid != 0 => Change::shell(ShellChange {
                        add_run: Some(ShellRun {
                            pid: req.client_pid,
                            started,
                            text: req.transcript,
                        }),
                        ..ShellChange::default()
                    }),
                    _ => Change::shell(ShellChange {
                        add_pending: Some(req.transcript),
                        ..ShellChange::default()
                    }),
                },
            )
            .await
            .map_err(status_of)?;
        Ok(Response::new(session_status(Some(&doc))))
    }

    async fn set_model(
        &self,
        request: Request<SetModelRequest>,
    ) -> Result<Response<SessionStatus>, Status> {
        let req = request.into_inner();
        let (group, folder) = group_for(&self.store, req.scope.as_ref()).await?;
        let model = req.model.trim().to_owned();
        if model.len() > 200 || model.chars().any(char::is_control) {
            return Err(Status::invalid_argument(
                "a model name is one line of at most 200 bytes",
            ));
        }
        let id = match session_arg(&req.session_id)? {
            Some(id) => id,
            None => group
                .get(None)
                .await
                .map_err(status_of)?
                .map(|d| d.id)
                .ok_or_else(|| Status::not_found("this folder has no conversation yet"))?,
        };
        let change = Change::settings(SettingsChange {
            model: Update::set_or_clear(Some(model).filter(|m| !m.is_empty())),
            ..SettingsChange::default()
        });
        let doc = group.commit(&id, change).await.map_err(status_of)?;
        let mut status = session_status(Some(&doc));
        let folder = std::path::PathBuf::from(folder);
        self.add_standing(&mut status, &group, &doc, req.provider.as_ref(), &folder)
            .await;
        Ok(Response::new(status))
    }

    async fn set_approve_all(
        &self,
        request: Request<SetApproveAllRequest>,
    ) -> Result<Response<SessionStatus>, Status> {
        let req = request.into_inner();
        let (group, folder) = group_for(&self.store, req.scope.as_ref()).await?;
        let id = session_arg(&req.session_id)?
            .ok_or_else(|| Status::invalid_argument("name the conversation"))?;
        let change = Change::settings(SettingsChange {
            approve_all: Some(req.approve_all),
            ..SettingsChange::default()
        });
        let doc = group.commit(&id, change).await.map_err(status_of)?;
        let mut status = session_status(Some(&doc));
        let folder = std::path::PathBuf::from(folder);
        self.add_standing(&mut status, &group, &doc, req.provider.as_ref(), &folder)
            .await;
        Ok(Response::new(status))
    }

    async fn sync_remote(
        &self,
        request: Request<SyncRemoteRequest>,
    ) -> Result<Response<SyncRemoteReply>, Status> {
        let req = request.into_inner();
        let Some(remote) = &self.remote else {
            return Ok(Response::new(SyncRemoteReply {
                remote: Some(super::remote_state(None)),
                ..SyncRemoteReply::default()
            }));
        };
        let wait = (req.wait_ms > 0).then(|| std::time::Duration::from_millis(req.wait_ms.into()));
        let crate::remote::SyncReport {
            pushed_conversations,
            pushed_records,
            reached,
            timed_out,
        } = remote.sync(wait).await;
        Ok(Response::new(SyncRemoteReply {
            remote: Some(super::remote_state(Some(remote))),
            pushed_conversations,
            pushed_records,
            reached,
            timed_out,
            forks: crate::remote::pull::unreported_forks(remote)
                .into_iter()
                .map(|f| RemoteFork {
                    message: f.line(),
                    id: f.from,
                    fork_id: f.to,
                    title: f.title,
                    machine: f.other,
                })
                .collect(),
        }))
    }
}
