//! The `Library` gRPC service: fork, rename, full-text search, export and
//! import of conversations.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use agentx_shared::proto::Location;
use agentx_shared::proto::library_server::Library;
use agentx_shared::proto::{
    ExportReply, ExportRequest, ForkRequest, Highlight, ImportReply, ImportRequest, RenameRequest,
    SearchHit, SearchReply, SearchRequest, SessionSummary, Timestamp,
};

use super::status::{search_status, task_failed};
use super::{group_for, session_arg, status_of, summary};
use crate::remote::{Remote, RemoteError};
use crate::search::SearchIndex;
use crate::store::{Change, SettingsChange, Store, fork};

pub struct LibraryService {
    store: Arc<Store>,
    search: Option<Arc<SearchIndex>>,
    remote: Option<Arc<Remote>>,
}

impl LibraryService {
    pub fn new(
        store: Arc<Store>,
        search: Option<Arc<SearchIndex>>,
        remote: Option<Arc<Remote>>,
    ) -> Self {
        Self {
            store,
            search,
            remote,
        }
    }

    /// Remote-only conversations' hits (bounded wait), or the one line
    /// saying the remote was not reached.
    async fn search_remote(
        &self,
        remote: Arc<Remote>,
        query: String,
        scope: Option<(String, String)>,
        limit: usize,
    ) -> Result<(Vec<SearchHit>, String), String> {
        let group_dir = scope.as_ref().map(|(f, a)| self.store.group_dir(f, a));
        let searching = async {
            let lister = Arc::clone(&remote);
            let (local, profile) = tokio::task::spawn_blocking(move || {
                (
                    lister.local_ids(group_dir.as_deref()),
                    lister.local_ids(None),
                )
            })
            .await
            .map_err(RemoteError::local)?;
            let key = scope.as_ref().map(|(folder, agent)| {
                (
                    crate::remote::project_key(std::path::Path::new(folder), remote.machine()),
                    agent.as_str(),
                )
            });
            let key = key.as_ref().map(|(p, a)| (p.as_str(), *a));
            let hits = remote.search(&query, key, &local, limit).await?;
            Ok::<_, RemoteError>((hits, profile))
        };
        match tokio::time::timeout(remote.list_wait(), searching).await {
            Ok(Ok(((hits, notes), profile))) => Ok((
                hits.into_iter()
                    .map(|h| {
                        // Kept by this profile in another checkout: local.
                        if profile.contains(&h.hit.session_id) {
                            wire_hit(h.hit, Location::Local, remote.machine().to_owned())
                        } else {
                            remote_hit(h)
                        }
                    })
                    .collect(),
                notes.join("; "),
            )),
            Ok(Err(e)) => Err(format!(
                "the remote store was not reached ({e}); showing this machine's matches only"
            )),
            Err(_) => Err(format!(
                "the remote store was not reached within {} ms; showing this machine's matches only",
                remote.list_wait().as_millis()
            )),
        }
    }
}

/// A search hit on the wire: where it was found and the machine that wrote it.
fn wire_hit(h: crate::search::Hit, r#where: Location, machine: String) -> SearchHit {
    SearchHit {
        session_id: h.session_id,
        folder: h.folder,
        agent: h.agent,
        title: h.title,
        turn: h.turn,
        at: Some(Timestamp { unix_ms: h.at }),
        snippet: h.snippet,
        highlights: highlights(h.highlights),
        score: h.score,
        r#where: r#where as i32,
        machine,
    }
}

fn remote_hit(h: crate::remote::RemoteHit) -> SearchHit {
    wire_hit(h.hit, Location::Remote, h.machine)
}

fn highlights(ranges: Vec<(usize, usize)>) -> Vec<Highlight> {
    ranges
        .into_iter()
        .map(|(start, end)| Highlight {
            start: u32::try_from(start).unwrap_or(u32::MAX),
            end: u32::try_from(end).unwrap_or(u32::MAX),
        })
        .collect()
}

/// Local and remote hits in one list, best first: each scored relative to
/// the best of its own engine (tantivy's and PostgreSQL's scales differ).
fn merge(local: Vec<SearchHit>, remote: Vec<SearchHit>, limit: usize) -> Vec<SearchHit> {
    fn relative(hits: Vec<SearchHit>) -> Vec<(f32, SearchHit)> {
        let best = hits.iter().map(|h| h.score).fold(0.0_f32, f32::max);
        hits.into_iter()
            .map(|h| (if best > 0.0 { h.score / best } else { 0.0 }, h))
            .collect()
    }
    let mut all = relative(local);
    all.extend(relative(remote));
    all.sort_by(|a, b| b.0.total_cmp(&a.0));
    all.into_iter().take(limit).map(|(_, h)| h).collect()
}

use crate::store::fork::MAX_TITLE;
/// Largest export document accepted by import.
pub const MAX_IMPORT_BYTES: usize = 128 * 1024 * 1024;
/// Export and import travel in pieces of this size, far under gRPC's
/// 4 MiB message limit.
const CHUNK: usize = 1024 * 1024;

/// Hands the heap that a big export or import used back to the system
/// (agentd's RSS would stay at the document's peak).
async fn release_memory() {
    crate::memory::trim().await;
}

type ExportStream =
    std::pin::Pin<Box<dyn futures_util::Stream<Item = Result<ExportReply, Status>> + Send>>;

fn agent_of(scope: Option<&agentx_shared::proto::Scope>) -> String {
    super::agent_name(scope.map_or("", |s| s.agent.as_str())).to_owned()
}

#[tonic::async_trait]
impl Library for LibraryService {
    async fn fork(
        &self,
        request: Request<ForkRequest>,
    ) -> Result<Response<SessionSummary>, Status> {
        let req = request.into_inner();
        let (group, folder) = group_for(&self.store, req.scope.as_ref()).await?;
        let dir = self.store.group_dir(&folder, &agent_of(req.scope.as_ref()));
        let session = session_arg(&req.session_id)?;
        // Run to its end: a client gone mid-fork leaves no journal behind.
        let doc =
            super::to_the_end(
                async move { fork::fork(&group, &dir, session, req.checkpoint).await },
            )
            .await?
            .map_err(status_of)?;
        Ok(Response::new(summary(&doc)))
    }

    async fn rename(
        &self,
        request: Request<RenameRequest>,
    ) -> Result<Response<SessionSummary>, Status> {
        let req = request.into_inner();
        let (group, _) = group_for(&self.store, req.scope.as_ref()).await?;
        let title = req.title.split_whitespace().collect::<Vec<_>>().join(" ");
        if title.is_empty() {
            return Err(Status::invalid_argument("a title needs some text"));
        }
        if title.chars().count() > MAX_TITLE {
            return Err(Status::invalid_argument(format!(
                "a title has at most {MAX_TITLE} characters"
            )));
        }
        let doc = group
            .get(session_arg(&req.session_id)?)
            .await
            .map_err(status_of)?
            .ok_or_else(|| Status::not_found("this folder has no conversation to rename"))?;
        let doc = group
            .commit(
                &doc.id,
                Change::settings(SettingsChange {
                    title: Some(title),
                    ..SettingsChange::default()
                }),
            )
            .await
            .map_err(status_of)?;
        Ok(Response::new(summary(&doc)))
    }

    async fn search(
        &self,
        request: Request<SearchRequest>,
    ) -> Result<Response<SearchReply>, Status> {
        let req = request.into_inner();
        let search = self.search.clone().ok_or_else(|| {
            Status::failed_precondition("the search index could not be opened (see agentd's log)")
        })?;
        let scope = if req.all {
            None
        } else {
            let scope = req
                .scope
                .as_ref()
                .ok_or_else(|| Status::invalid_argument("missing scope (folder and agent)"))?;
            Some((scope.folder.clone(), agent_of(Some(scope))))
        };
        let limit = if req.limit == 0 {
            20
        } else {
            req.limit.min(1000)
        } as usize;
        let started = std::time::Instant::now();
        let remote = self
            .remote
            .clone()
            .map(|remote| self.search_remote(remote, req.query.clone(), scope.clone(), limit));
        let (search, query) = (Arc::clone(&search), req.query);
        let local = tokio::task::spawn_blocking(move || {
            let scope = scope.as_ref().map(|(f, a)| (f.as_str(), a.as_str()));
            (search.search(&query, scope, limit), search)
        });
        let (local, remote) = match remote {
            Some(remote) => {
                let (local, remote) = tokio::join!(local, remote);
                (local, Some(remote))
            }
            None => (local.await, None),
        };
        let (hits, search) = local.map_err(task_failed)?;
        let hits = hits.map_err(search_status)?;
        let machine = self
            .remote
            .as_ref()
            .map(|r| r.machine().to_owned())
            .unwrap_or_default();
        let hits: Vec<SearchHit> = hits
            .into_iter()
            .map(|h| wire_hit(h, Location::Local, machine.clone()))
            .collect();
        let (hits, remote_note) = match remote {
            Some(Ok((remote_hits, note))) => (merge(hits, remote_hits, limit), note),
            Some(Err(note)) => (hits, note),
            None => (hits, String::new()),
        };
        let (indexing, indexed_sessions) = search.progress();
        Ok(Response::new(SearchReply {
            hits,
            indexing,
            indexed_sessions,
            took_micros: u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
            remote_note,
        }))
    }

    async fn export(
        &self,
        request: Request<ExportRequest>,
    ) -> Result<Response<ExportStream>, Status> {
        let req = request.into_inner();
        let (group, folder) = group_for(&self.store, req.scope.as_ref()).await?;
        let dir = self.store.group_dir(&folder, &agent_of(req.scope.as_ref()));
        let document = fork::export(&group, &dir, session_arg(&req.session_id)?)
            .await
            .map_err(status_of)?;
        let bytes = document.into_bytes();
        let pieces = futures_util::stream::unfold((bytes, 0usize), |(bytes, at)| async move {
            if at >= bytes.len() {
                drop(bytes);
                release_memory().await;
                return None;
            }
            let end = (at + CHUNK).min(bytes.len());
            let chunk = bytes[at..end].to_vec();
            Some((Ok(ExportReply { chunk }), (bytes, end)))
        });
        Ok(Response::new(Box::pin(pieces)))
    }

    async fn import(
        &self,
        request: Request<tonic::Streaming<ImportRequest>>,
    ) -> Result<Response<ImportReply>, Status> {
        let mut pieces = request.into_inner();
        let mut scope = None;
        let mut document = Vec::new();
        while let Some(piece) = pieces.message().await? {
            if scope.is_none() {
                scope = piece.scope;
            }
            if document.len() + piece.chunk.len() > MAX_IMPORT_BYTES {
                return Err(Status::invalid_argument(format!(
                    "the export is larger than {} MiB, the most an import takes",
                    MAX_IMPORT_BYTES >> 20
                )));
            }
            document.extend_from_slice(&piece.chunk);
        }
        let document = String::from_utf8(document)
            .map_err(|_| Status::invalid_argument("the export is not UTF-8 text"))?;
        let (group, folder) = group_for(&self.store, scope.as_ref()).await?;
        let agent = agent_of(scope.as_ref());
        let dir = self.store.group_dir(&folder, &agent);
        // Run to its end: a client gone mid-import leaves no journal behind.
        let imported = super::to_the_end(async move {
            let imported = fork::import(&group, &dir, &folder, &agent, document).await;
            release_memory().await;
            imported
        })
        .await?;
        let (doc, renamed_from) = imported.map_err(status_of)?;
        Ok(Response::new(ImportReply {
            session: Some(summary(&doc)),
            renamed_from: renamed_from.unwrap_or_default(),
        }))
    }
}
