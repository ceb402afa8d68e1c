//! The `Library` gRPC service: fork, rename, full-text search, export and
//! import of conversations.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use agentx_shared::proto::library_server::Library;
use agentx_shared::proto::{
    ExportReply, ExportRequest, ForkRequest, Highlight, ImportReply, ImportRequest, RenameRequest,
    SearchHit, SearchReply, SearchRequest, SessionSummary, Timestamp,
};

use super::{group_for, session_arg, status_of, summary};
use crate::search::SearchIndex;
use crate::store::{Change, Store, fork};

pub struct LibraryService {
    store: Arc<Store>,
    search: Option<Arc<SearchIndex>>,
}

impl LibraryService {
    pub fn new(store: Arc<Store>, search: Option<Arc<SearchIndex>>) -> Self {
        Self { store, search }
    }
}

/// Longest title kept, in characters.
const MAX_TITLE: usize = 200;
/// Largest export document accepted by import.
pub const MAX_IMPORT_BYTES: usize = 64 * 1024 * 1024;

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
        let (group, folder) = group_for(&self.store, req.scope.as_ref())?;
        let dir = self.store.group_dir(&folder, &agent_of(req.scope.as_ref()));
        let doc = fork::fork(&group, &dir, session_arg(&req.session_id)?, req.checkpoint)
            .await
            .map_err(status_of)?;
        Ok(Response::new(summary(&doc)))
    }

    async fn rename(
        &self,
        request: Request<RenameRequest>,
    ) -> Result<Response<SessionSummary>, Status> {
        let req = request.into_inner();
        let (group, _) = group_for(&self.store, req.scope.as_ref())?;
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
                Change {
                    title: Some(title),
                    ..Change::default()
                },
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
        let (search, query) = (Arc::clone(&search), req.query);
        let (hits, search) = tokio::task::spawn_blocking(move || {
            let scope = scope.as_ref().map(|(f, a)| (f.as_str(), a.as_str()));
            (search.search(&query, scope, limit), search)
        })
        .await
        .map_err(|e| Status::internal(e.to_string()))?;
        let hits = hits.map_err(|e| match e {
            crate::search::SearchError::Query(m) => Status::invalid_argument(m),
            other => Status::internal(other.to_string()),
        })?;
        // Hook point for the remote store: remote-only conversations of the
        // project would be searched here and appended with `where: "remote"`.
        let (indexing, indexed_sessions) = search.progress();
        Ok(Response::new(SearchReply {
            hits: hits
                .into_iter()
                .map(|h| SearchHit {
                    session_id: h.session_id,
                    folder: h.folder,
                    agent: h.agent,
                    title: h.title,
                    turn: h.turn,
                    at: Some(Timestamp { unix_ms: h.at }),
                    snippet: h.snippet,
                    highlights: h
                        .highlights
                        .into_iter()
                        .map(|(start, end)| Highlight {
                            start: u32::try_from(start).unwrap_or(u32::MAX),
                            end: u32::try_from(end).unwrap_or(u32::MAX),
                        })
                        .collect(),
                    score: h.score,
                    r#where: "local".into(),
                })
                .collect(),
            indexing,
            indexed_sessions,
            took_micros: u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
        }))
    }

    async fn export(
        &self,
        request: Request<ExportRequest>,
    ) -> Result<Response<ExportReply>, Status> {
        let req = request.into_inner();
        let (group, folder) = group_for(&self.store, req.scope.as_ref())?;
        let dir = self.store.group_dir(&folder, &agent_of(req.scope.as_ref()));
        let document = fork::export(&group, &dir, session_arg(&req.session_id)?)
            .await
            .map_err(status_of)?;
        Ok(Response::new(ExportReply { document }))
    }

    async fn import(
        &self,
        request: Request<ImportRequest>,
    ) -> Result<Response<ImportReply>, Status> {
        let req = request.into_inner();
        if req.document.len() > MAX_IMPORT_BYTES {
            return Err(Status::invalid_argument(format!(
                "the export is larger than {} MiB",
                MAX_IMPORT_BYTES >> 20
            )));
        }
        let (group, folder) = group_for(&self.store, req.scope.as_ref())?;
        let agent = agent_of(req.scope.as_ref());
        let dir = self.store.group_dir(&folder, &agent);
        let (doc, renamed_from) = fork::import(&group, &dir, &folder, &agent, &req.document)
            .await
            .map_err(status_of)?;
        Ok(Response::new(ImportReply {
            session: Some(summary(&doc)),
            renamed_from: renamed_from.unwrap_or_default(),
        }))
    }
}
