//! `ServerState`: what the HTTP and websocket handlers share — the runtime, whether a
//! keyless caller is the local user, and how many sockets each user holds.

use std::collections::HashMap;
use std::sync::Arc;

use std::net::SocketAddr;

use parking_lot::Mutex;
use weft_runtime::{Config, Providers, Runtime, StartupError};
use weft_store::Store;

pub struct ServerState {
    pub runtime: Arc<Runtime>,
    /// No API keys and a loopback bind: a caller without a key is the local user.
    pub local_user_allowed: bool,
    pub sockets: SocketCounts,
}

impl ServerState {
    /// The runtime on `store`, and who may connect: the local user when no keys are
    /// configured and `bind` is loopback (no one otherwise, which is warned about).
    pub async fn start(
        config: Config,
        store: Store,
        providers: Providers,
        bind: SocketAddr,
    ) -> Result<Arc<ServerState>, StartupError> {
        let keyless = config.auth.api_keys.is_empty();
        let local_user_allowed = keyless && bind.ip().is_loopback();
        if keyless && !local_user_allowed {
            tracing::warn!(
                %bind,
                "no API keys are configured and the bind is not loopback: every connection will be refused \
                 (set [auth] api_keys or WEFT_API_KEYS)"
            );
        }
        let runtime = Runtime::new(config, store, providers, local_user_allowed).await?;
        Ok(ServerState::new(runtime, local_user_allowed))
    }

    pub fn new(runtime: Arc<Runtime>, local_user_allowed: bool) -> Arc<ServerState> {
        let per_user = runtime.config.server.max_sockets_per_user;
        Arc::new(ServerState {
            runtime,
            local_user_allowed,
            sockets: SocketCounts::new(per_user),
        })
    }
}

/// Websockets open per user, within a cap, so one key holder cannot take every slot.
pub struct SocketCounts {
    per_user: usize,
    open: Arc<Mutex<HashMap<String, usize>>>,
}

/// One open websocket's place in its user's count; dropping it frees the place.
pub struct SocketSlot {
    user: String,
    open: Arc<Mutex<HashMap<String, usize>>>,
}

impl Drop for SocketSlot {
    fn drop(&mut self) {
        let mut open = self.open.lock();
        if let Some(n) = open.get_mut(&self.user) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(&self.user);
            }
        }
    }
}

impl SocketCounts {
    pub fn new(per_user: usize) -> Self {
        SocketCounts {
            per_user,
            open: Arc::default(),
        }
    }

    /// A place for one more socket of `user`, unless they hold the most allowed (0: no cap).
    pub fn open(&self, user: &str) -> Option<SocketSlot> {
        let mut open = self.open.lock();
        let count = open.entry(user.to_owned()).or_insert(0);
        if self.per_user > 0 && *count >= self.per_user {
            return None;
        }
        *count += 1;
        Some(SocketSlot {
            user: user.to_owned(),
            open: self.open.clone(),
        })
    }
}
