//! Keeps agentd there for the page, as every CLI command does: before an API
//! call, a daemon that is gone (stopped, crashed) is started again.

use std::sync::{Arc, Mutex};

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse as _, Response};
use tonic::transport::Channel;

use agentx_shared::profile::Profile;

use super::Web;
use super::reply::ApiError;
use crate::connect;

/// The connection to agentd, replaced when agentd had to be started again.
pub struct Link {
    profile: Profile,
    channel: Mutex<Channel>,
    /// One start at a time from this process (the startup lock orders
    /// processes).
    starting: tokio::sync::Mutex<()>,
}

impl Link {
    pub fn new(profile: Profile, channel: Channel) -> Self {
        Self {
            profile,
            channel: Mutex::new(channel),
            starting: tokio::sync::Mutex::new(()),
        }
    }

    pub fn channel(&self) -> Channel {
        match self.channel.lock() {
            Ok(channel) => channel.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Starts agentd when no live one holds the profile's pid lock.
    async fn ensure(&self) -> Result<(), ApiError> {
        if connect::pid_lock_held(&self.profile.pid_file()) {
            return Ok(());
        }
        let _one = self.starting.lock().await;
        if connect::pid_lock_held(&self.profile.pid_file()) {
            return Ok(());
        }
        let daemon = connect::connect_or_start(&self.profile)
            .await
            .map_err(|e| ApiError::unavailable(e.message))?;
        match self.channel.lock() {
            Ok(mut channel) => *channel = daemon.channel,
            Err(poisoned) => *poisoned.into_inner() = daemon.channel,
        }
        Ok(())
    }
}

/// Before each API call: agentd runs (started again if it was gone).
pub async fn ensure(State(web): State<Arc<Web>>, request: Request, next: Next) -> Response {
    match web.link.ensure().await {
        Ok(()) => next.run(request).await,
        Err(e) => e.into_response(),
    }
}
