//! The refusals of a custom responder, in place of the ones the guards render by default.

use std::collections::BTreeMap;
use std::fmt;

use utoipa::Modify;
use utoipa::openapi::path::Operation;
use utoipa::openapi::schema::Schema;
use utoipa::openapi::{Content, OpenApi, RefOr, Response};

use super::operation::{EXTENSION, PROBLEM_JSON, REFUSAL_PAGE};
use crate::RejectionKind;

/// What a [custom responder](crate::IdemBuilder::with_responder) answers a refusal with,
/// in place of the problem JSON and the HTML page the guards render by default: a
/// [`Modify`] for the whole document, applied once after the guards are described, as
/// the responder is one for the whole runtime.
///
/// In every guarded operation (one whose `x-idem-guards` lists a guard), each response
/// that carries a guard's problem JSON loses it and the guard's HTML page, and gains
/// these contents instead. Its description (which refusals share the status) and its
/// headers (`Retry-After`) stay; what the handler documents for the same status stays too.
///
/// ```
/// use idem_axum::IdempotencyLayer;
/// use idem_axum::openapi::{DocumentedGuard, RefusalContent};
/// use utoipa::openapi::schema::{ObjectBuilder, Type};
/// use utoipa::openapi::Content;
/// use utoipa::{Modify, OpenApi};
///
/// #[utoipa::path(post, path = "/payments", responses((status = 201, description = "Paid")))]
/// async fn pay() {}
///
/// #[derive(OpenApi)]
/// #[openapi(paths(pay))]
/// struct Api;
///
/// // The runtime's responder answers every refusal as `{"error": "<code>"}`.
/// let error = ObjectBuilder::new()
///     .schema_type(Type::Object)
///     .property("error", ObjectBuilder::new().schema_type(Type::String))
///     .required("error");
/// let mut api = Api::openapi();
/// IdempotencyLayer::new().guard_doc().at("/payments").modify(&mut api);
/// RefusalContent::new()
///     .with("application/json", Content::new(Some(error)))
///     .modify(&mut api);
///
/// let pay = api.paths.paths["/payments"].post.as_ref().unwrap();
/// let utoipa::openapi::RefOr::T(reused) = &pay.responses.responses["422"] else { panic!() };
/// assert!(reused.content.contains_key("application/json"));
/// assert!(!reused.content.contains_key("application/problem+json"));
/// ```
#[derive(Clone, Default)]
pub struct RefusalContent {
    contents: BTreeMap<String, Content>,
}

impl fmt::Debug for RefusalContent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RefusalContent")
            .field("media_types", &self.contents.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl RefusalContent {
    /// No contents yet: applied as it is, it leaves refusals without a body described.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `content` as the refusals' body in `media_type`.
    pub fn with(mut self, media_type: impl Into<String>, content: Content) -> Self {
        self.contents.insert(media_type.into(), content);
        self
    }

    fn replace_in(&self, operation: &mut Operation) {
        let guarded = operation
            .extensions
            .as_ref()
            .is_some_and(|extensions| extensions.contains_key(EXTENSION));
        if !guarded {
            return;
        }
        for response in operation.responses.responses.values_mut() {
            if let RefOr::T(response) = response
                && is_refusal(response)
            {
                response.content.shift_remove(PROBLEM_JSON);
                if response
                    .content
                    .get("text/html")
                    .is_some_and(is_refusal_page)
                {
                    response.content.shift_remove("text/html");
                }
                for (media_type, content) in &self.contents {
                    response
                        .content
                        .insert(media_type.clone(), RefOr::T(content.clone()));
                }
            }
        }
    }
}

impl Modify for RefusalContent {
    fn modify(&self, openapi: &mut OpenApi) {
        for item in openapi.paths.paths.values_mut() {
            for (_, operation) in super::operations(item) {
                if let Some(operation) = operation {
                    self.replace_in(operation);
                }
            }
        }
    }
}

/// Whether `response` carries a guard's problem JSON: its `type` takes the refusals' URLs.
fn is_refusal(response: &Response) -> bool {
    let Some((refusals_page, _)) = RejectionKind::Duplicate.type_uri().split_once('#') else {
        return false;
    };
    let Some(RefOr::T(content)) = response.content.get(PROBLEM_JSON) else {
        return false;
    };
    let Some(RefOr::T(Schema::Object(problem))) = &content.schema else {
        return false;
    };
    let Some(RefOr::T(Schema::Object(type_uri))) = problem.properties.get("type") else {
        return false;
    };
    type_uri.enum_values.as_ref().is_some_and(|values| {
        values.iter().any(|value| {
            value
                .as_str()
                .is_some_and(|uri| uri.starts_with(refusals_page))
        })
    })
}

/// Whether `content` is the HTML page a guard describes for its refusals.
fn is_refusal_page(content: &RefOr<Content>) -> bool {
    matches!(content, RefOr::T(Content { schema: Some(RefOr::T(Schema::Object(page))), .. })
        if page.description.as_deref() == Some(REFUSAL_PAGE))
}

#[cfg(test)]
mod tests {
    use axum::Router;
    use axum::body::{Body, to_bytes};
    use axum::http::{Request, StatusCode, header};
    use axum::response::IntoResponse;
    use tower::ServiceExt;
    use utoipa::openapi::schema::{ObjectBuilder, Type};
    use utoipa_axum::router::OpenApiRouter;
    use utoipa_axum::routes;

    use super::*;
    use crate::openapi::GuardedRoutes;
    use crate::{Idem, IdempotencyLayer};

    #[utoipa::path(
        post,
        path = "/payments",
        responses(
            (status = 201, description = "Paid"),
            (status = 409, description = "The invoice is already paid", body = String, content_type = "text/plain")
        )
    )]
    async fn pay() -> impl IntoResponse {
        (StatusCode::CREATED, "paid")
    }

    #[utoipa::path(get, path = "/payments", responses((status = 200, description = "Listed")))]
    async fn list() -> &'static str {
        "none"
    }

    /// The document says what a runtime with a responder of its own answers: a refusal the
    /// router gives has a media type the document lists for its status, and the guards'
    /// problem JSON and page are gone; what the handler documents stays.
    #[tokio::test]
    async fn the_document_describes_the_responders_refusals() {
        let idem = Idem::builder()
            .with_responder(|rejection| {
                let body = serde_json::json!({ "error": rejection.kind().code() });
                (rejection.status(), axum::Json(body)).into_response()
            })
            .build();
        let (router, mut api) = OpenApiRouter::new()
            .routes(routes!(pay).guarded_by(IdempotencyLayer::new().with_required(true)))
            .routes(routes!(list))
            .split_for_parts();
        let error = ObjectBuilder::new()
            .schema_type(Type::Object)
            .property("error", ObjectBuilder::new().schema_type(Type::String))
            .required("error");
        RefusalContent::new()
            .with("application/json", Content::new(Some(error)))
            .modify(&mut api);
        let app: Router = router.layer(idem.layer());

        let post = |key: Option<&str>| {
            let mut request = Request::post("/payments");
            if let Some(key) = key {
                request = request.header("idempotency-key", key);
            }
            request.body(Body::empty()).unwrap()
        };
        let refused = app.clone().oneshot(post(None)).await.unwrap();
        assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
        let media_type = refused.headers()[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .to_owned();
        let body = to_bytes(refused.into_body(), 1 << 16).await.unwrap();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert!(body["error"].is_string(), "{body}");

        let operation = api.paths.paths["/payments"].post.as_ref().unwrap();
        let RefOr::T(bad_request) = &operation.responses.responses["400"] else {
            panic!("described in place")
        };
        assert!(
            bad_request.content.contains_key(&media_type),
            "the refusal's {media_type} is described"
        );
        assert!(!bad_request.content.contains_key(PROBLEM_JSON));
        assert!(!bad_request.content.contains_key("text/html"));
        let RefOr::T(conflict) = &operation.responses.responses["409"] else {
            panic!("described in place")
        };
        assert!(
            conflict.content.contains_key("text/plain"),
            "the handler's own"
        );
        assert!(conflict.content.contains_key("application/json"));
        assert!(!conflict.content.contains_key(PROBLEM_JSON));
        let RefOr::T(paid) = &operation.responses.responses["201"] else {
            panic!("described in place")
        };
        assert!(paid.content.is_empty(), "not a refusal");
        let listing = api.paths.paths["/payments"].get.as_ref().unwrap();
        assert_eq!(listing.responses.responses.len(), 1, "unguarded, untouched");
    }
}
