//! The REST API, one file per resource: threads (and the record, traces, deletion), agents,
//! assets, collections, workflows, the prompt API, and health, metrics and modes; the routes
//! here, each described for the OpenAPI document ([`openapi`]). Every error is an
//! [`ApiError`].

pub mod agents;
pub mod assets;
pub mod body;
pub mod collections;
pub mod health;
pub mod openapi;
pub mod paths;
pub mod prompts;
pub mod threads;
pub mod workflows;

use std::sync::Arc;

use aide::axum::routing::{delete_with, get_with, post_with};
use aide::axum::ApiRouter;
use aide::transform::TransformOperation;

pub use crate::error::{identifier, ApiError, Rest};
pub use body::JsonBody;

use crate::state::ServerState;

/// An operation's id, tag and summary.
fn op(
    id: &'static str,
    tag: &'static str,
    summary: &'static str,
) -> impl for<'t> FnOnce(TransformOperation<'t>) -> TransformOperation<'t> {
    move |operation| operation.id(id).tag(tag).summary(summary)
}

/// [`op`], and the operations the `status` response leads to ([`openapi::links`]).
fn op_then(
    id: &'static str,
    tag: &'static str,
    summary: &'static str,
    status: u16,
    follows: &'static [openapi::Follow],
) -> impl for<'t> FnOnce(TransformOperation<'t>) -> TransformOperation<'t> {
    move |operation| {
        op(id, tag, summary)(operation).with(|mut operation| {
            openapi::links(operation.inner_mut(), status, follows);
            operation
        })
    }
}

const PROMPT_ID: &[(&str, &str)] = &[("id", "$response.body#/id")];
const PROMPT_THREAD: &[(&str, &str)] = &[("id", "$response.body#/conversation_id")];
/// An agent's or a collection's name.
const NAME: &[(&str, &str)] = &[("name", "$response.body#/name")];
const WORKFLOW_ID: &[(&str, &str)] = &[("id", "$response.body#/id")];

/// What a prompt's answer leads to.
const AFTER_PROMPT: &[openapi::Follow] = &[
    ("getPrompt", PROMPT_ID),
    ("promptEvents", PROMPT_ID),
    ("approvePrompt", PROMPT_ID),
    ("rejectPrompt", PROMPT_ID),
    ("listMessages", PROMPT_THREAD),
    ("listItems", PROMPT_THREAD),
    (
        "getTrace",
        &[
            ("id", "$response.body#/conversation_id"),
            ("message_id", "$response.body#/id"),
        ],
    ),
    ("deleteThread", PROMPT_THREAD),
];

/// Every REST route (`/ws`, the web client and `/openapi.json` are the router's).
pub fn routes() -> ApiRouter<Arc<ServerState>> {
    ApiRouter::new()
        .merge(thread_routes())
        .merge(resource_routes())
        .merge(workflow_routes())
        .merge(prompt_routes())
        .api_route(
            "/modes",
            get_with(
                health::modes,
                op("listModes", "server", "The execution modes"),
            ),
        )
        .api_route(
            "/healthz",
            get_with(
                health::healthz,
                op("health", "server", "Whether this server can serve"),
            ),
        )
        .api_route(
            "/metrics",
            get_with(
                health::metrics,
                op("metrics", "server", "Prometheus metrics"),
            ),
        )
}

fn thread_routes() -> ApiRouter<Arc<ServerState>> {
    ApiRouter::new()
        .api_route(
            "/threads",
            get_with(
                threads::list,
                op_then(
                    "listThreads",
                    "threads",
                    "Your threads",
                    200,
                    &[
                        ("listMessages", &[("id", "$response.body#/0/id")]),
                        ("listItems", &[("id", "$response.body#/0/id")]),
                    ],
                ),
            ),
        )
        .api_route(
            "/threads/{id}",
            delete_with(
                threads::delete,
                op(
                    "deleteThread",
                    "threads",
                    "Delete a thread (its running turn stopped first)",
                ),
            )
            .patch_with(
                threads::rename,
                op("renameThread", "threads", "Rename a thread"),
            ),
        )
        .api_route(
            "/threads/{id}/messages",
            get_with(
                threads::messages,
                op("listMessages", "threads", "A thread's messages"),
            ),
        )
        .api_route(
            "/threads/{id}/items",
            get_with(
                threads::items,
                op("listItems", "threads", "A thread's whole record"),
            ),
        )
        .api_route(
            "/threads/{id}/messages/{message_id}/trace",
            get_with(
                threads::trace,
                op("getTrace", "threads", "One turn's trace, subtasks nested"),
            ),
        )
}

fn resource_routes() -> ApiRouter<Arc<ServerState>> {
    ApiRouter::new()
        .api_route(
            "/agents",
            get_with(
                agents::list,
                op("listAgents", "agents", "The default agent and yours"),
            )
            .post_with(
                agents::create,
                op_then(
                    "createAgent",
                    "agents",
                    "Store an agent",
                    201,
                    &[
                        ("getAgent", NAME),
                        ("replaceAgent", NAME),
                        ("deleteAgent", NAME),
                    ],
                ),
            ),
        )
        .api_route(
            "/agents/{name}",
            get_with(agents::get, op("getAgent", "agents", "One agent"))
                .put_with(
                    agents::replace,
                    op("replaceAgent", "agents", "Replace a stored agent"),
                )
                .delete_with(
                    agents::delete,
                    op("deleteAgent", "agents", "Delete a stored agent"),
                ),
        )
        .api_route("/assets/{id}", get_with(assets::serve, assets::describe))
        .api_route(
            "/collections",
            get_with(
                collections::list,
                op(
                    "listCollections",
                    "knowledge",
                    "Your collections, then shared ones",
                ),
            )
            .post_with(
                collections::create,
                op_then(
                    "createCollection",
                    "knowledge",
                    "Create a collection",
                    201,
                    &[
                        ("listDocuments", NAME),
                        ("addDocument", NAME),
                        ("deleteCollection", NAME),
                    ],
                ),
            ),
        )
        .api_route(
            "/collections/{name}",
            delete_with(
                collections::delete,
                op(
                    "deleteCollection",
                    "knowledge",
                    "Delete one of your collections",
                ),
            ),
        )
        .api_route(
            "/collections/{name}/documents",
            get_with(
                collections::documents,
                op("listDocuments", "knowledge", "A collection's documents"),
            )
            .post_with(
                collections::add_document,
                op("addDocument", "knowledge", "Add a document (text or a URL)"),
            ),
        )
}

fn workflow_routes() -> ApiRouter<Arc<ServerState>> {
    ApiRouter::new()
        .api_route(
            "/node-types",
            get_with(
                workflows::node_types,
                op("listNodeTypes", "workflows", "The node catalogue"),
            ),
        )
        .api_route(
            "/workflows",
            get_with(
                workflows::list,
                op("listWorkflows", "workflows", "Your workflows"),
            )
            .post_with(
                workflows::create,
                op_then(
                    "createWorkflow",
                    "workflows",
                    "Save a workflow (its graph validated)",
                    201,
                    &[
                        ("getWorkflow", WORKFLOW_ID),
                        ("replaceWorkflow", WORKFLOW_ID),
                        ("runWorkflow", WORKFLOW_ID),
                        ("deleteWorkflow", WORKFLOW_ID),
                    ],
                ),
            ),
        )
        .api_route(
            "/workflows/{id}",
            get_with(
                workflows::get,
                op("getWorkflow", "workflows", "One workflow"),
            )
            .put_with(
                workflows::replace,
                op("replaceWorkflow", "workflows", "Replace a workflow"),
            )
            .delete_with(
                workflows::delete,
                op("deleteWorkflow", "workflows", "Delete a workflow"),
            ),
        )
        .api_route(
            "/workflows/{id}/runs",
            post_with(workflows::run, |operation| {
                op(
                    "runWorkflow",
                    "workflows",
                    "Run a workflow now; the finished run",
                )(operation)
                .with(|mut operation| {
                    openapi::optional_body(operation.inner_mut());
                    operation
                })
            }),
        )
}

fn prompt_routes() -> ApiRouter<Arc<ServerState>> {
    ApiRouter::new()
        .api_route(
            "/prompt",
            post_with(
                prompts::create,
                op_then(
                    "createPrompt",
                    "prompts",
                    "Run a turn; answered when done or waiting on an approval",
                    200,
                    AFTER_PROMPT,
                ),
            ),
        )
        .api_route(
            "/prompts/{id}",
            get_with(
                prompts::get,
                op("getPrompt", "prompts", "A prompt as it stands"),
            ),
        )
        .api_route(
            "/prompts/{id}/events",
            get_with(prompts::events, prompts::describe_events),
        )
        .api_route(
            "/prompts/{id}/approve",
            post_with(
                prompts::approve,
                op(
                    "approvePrompt",
                    "prompts",
                    "Allow its pending call; answered when it next stops",
                ),
            ),
        )
        .api_route(
            "/prompts/{id}/reject",
            post_with(
                prompts::reject,
                op(
                    "rejectPrompt",
                    "prompts",
                    "Deny its pending call; answered when it next stops",
                ),
            ),
        )
}
