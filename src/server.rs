//! The HTTP surface: routes and the tower layers around them, outermost first.

pub mod admin;
pub mod auth;
pub mod body;
pub mod fleet_state;
pub mod handlers;
pub mod info;
pub mod limits;
pub mod request_id;
pub mod state;

use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::Router;

pub use state::AppState;

pub fn router(state: Arc<AppState>) -> Router {
    let openai = Router::new()
        .route("/v1/chat/completions", post(handlers::openai::chat))
        .route("/v1/completions", post(handlers::openai::completions))
        .route("/generate", post(handlers::generate::generate))
        .route("/v1/responses", post(handlers::messages::responses));
    let messages = Router::new().route(
        handlers::messages::MESSAGES_PATH,
        post(handlers::messages::messages),
    );
    let admission =
        crate::admission::AdmissionLayer::new(&state.config.admission, Arc::clone(&state.metrics));
    // Every layer costs on every request (a boxed service clone, a boxed future), so one that
    // would do nothing is not added: admission without limits, the key check without a key.
    let guard = |mut routes: Router<Arc<AppState>>| {
        // Admission sits inside the key check: a client without a valid key takes no slot and
        // no rate-limit bucket.
        if let Some(admission) = admission.clone() {
            routes = routes.route_layer(admission);
        }
        if state.config.api_key.is_some() {
            routes = routes.route_layer(axum::middleware::from_fn_with_state(
                Arc::clone(&state),
                auth::require_api_key,
            ));
        }
        routes
    };
    // Outermost on `/v1/messages`: it sees every error there, the key check's too.
    let messages = guard(messages).route_layer(axum::middleware::from_fn(
        handlers::messages::anthropic_errors,
    ));
    let inference = guard(openai).merge(messages);
    let admin = Router::new()
        .route("/workers", get(admin::list).post(admin::add))
        .route("/workers/{id}", axum::routing::delete(admin::remove))
        .route_layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state),
            auth::require_admin_key,
        ));
    let app: Router<Arc<AppState>> = Router::new()
        .merge(inference)
        .merge(admin)
        .route("/v1/models", get(info::models))
        .route("/health", get(info::health))
        .route("/readiness", get(info::readiness))
        .route("/metrics", get(info::metrics))
        .route("/server_info", get(info::server_info))
        .route("/get_server_info", get(info::server_info))
        .route("/model_info", get(info::model_info))
        .route("/get_model_info", get(info::model_info))
        .fallback(info::not_found)
        // axum's own 405 has an empty body; clients get the OpenAI error shape everywhere.
        .method_not_allowed_fallback(method_not_allowed)
        // Our own extractor turns an oversized body into an OpenAI 413.
        // `--request-timeout-secs` is enforced inside the relay (`relay::reliability::Deadlines`),
        // which covers the response stream too and aborts the worker's request.
        .layer(DefaultBodyLimit::max(state.limits.body_bytes));
    app.with_state(state)
}

async fn method_not_allowed() -> axum::response::Response {
    use axum::response::IntoResponse;
    crate::error::GatewayError::MethodNotAllowed.into_response()
}
