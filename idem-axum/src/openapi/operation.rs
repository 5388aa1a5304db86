//! What one guard adds to one operation of an OpenAPI document, and how it is added.

use std::sync::Arc;

use http::{HeaderName, StatusCode};
use serde_json::{Value, json};
use utoipa::openapi::path::{Operation, Parameter, ParameterBuilder, ParameterIn};
use utoipa::openapi::request_body::RequestBody;
use utoipa::openapi::schema::{AllOfBuilder, Object, ObjectBuilder, Schema, Type};
use utoipa::openapi::{Content, Header, RefOr, Required, Response};

use crate::RejectionKind;

/// The extension, on an operation, that lists the guards on it with their settings.
pub(crate) const EXTENSION: &str = "x-idem-guards";

/// The media type of every refusal a guard renders by default.
pub(crate) const PROBLEM_JSON: &str = "application/problem+json";

/// The description of a refusal's HTML page, which a browser is given.
pub(crate) const REFUSAL_PAGE: &str =
    "The refusal as a page, to a client that prefers HTML (a browser)";

/// The media types a form is posted in, the two a form token is read from.
const FORM_TYPES: [&str; 2] = ["application/x-www-form-urlencoded", "multipart/form-data"];

/// What a guard adds to an operation it guards, read from the guard's settings for the
/// operation's method.
pub(crate) struct OperationGuard {
    /// A sentence for the operation's description.
    pub(crate) summary: String,
    /// The request header that carries the key, if the client sends one.
    pub(crate) key: Option<KeyParameter>,
    /// Every refusal the guard can give this operation's requests.
    pub(crate) refusals: Vec<RejectionKind>,
    /// The headers of a replayed response, if the guard replays.
    pub(crate) replay: Option<Replay>,
    /// The form token's field and header, for a guard that spends one.
    pub(crate) form_token: Option<FormTokenField>,
    /// The guard and its settings, as the operation's extension lists them.
    pub(crate) extension: Value,
}

/// The request header an idempotency key is sent in.
pub(crate) struct KeyParameter {
    pub(crate) name: HeaderName,
    pub(crate) required: bool,
}

/// How a guard marks and keeps the responses it replays.
pub(crate) struct Replay {
    /// The header `true` on a replayed response.
    pub(crate) header: HeaderName,
    /// The header that advertises how long a key is kept, and its value in seconds.
    pub(crate) retention: Option<(HeaderName, u64)>,
    /// Which statuses are kept, and so may be replayed.
    pub(crate) stores: Arc<dyn Fn(StatusCode) -> bool + Send + Sync>,
}

/// Where a form token is posted.
pub(crate) struct FormTokenField {
    pub(crate) field: String,
    pub(crate) header: HeaderName,
}

impl OperationGuard {
    /// Adds this guard to `operation`.
    pub(crate) fn apply(&self, operation: &mut Operation) {
        let stored = stored_statuses(operation, self.replay.as_ref());
        if let Some(key) = &self.key {
            add_parameter(operation, key_parameter(key));
        }
        if let Some(form) = &self.form_token {
            add_parameter(operation, form_token_header(form));
            add_form_field(operation, &form.field);
        }
        if let Some(replay) = &self.replay {
            mark_replays(operation, replay, &stored);
        }
        self.add_refusals(operation);
        let description = operation.description.get_or_insert_with(String::new);
        if !description.is_empty() {
            description.push_str("\n\n");
        }
        description.push_str(&self.summary);
        let extensions = operation.extensions.get_or_insert_with(Default::default);
        match extensions.get_mut(EXTENSION) {
            Some(Value::Array(guards)) => guards.push(self.extension.clone()),
            _ => {
                extensions.insert(EXTENSION.to_owned(), json!([self.extension]));
            }
        }
    }

    /// One response per refusal status, `application/problem+json`, whose `type` is one
    /// of the refusals' type URLs; merged into a response the operation already has.
    fn add_refusals(&self, operation: &mut Operation) {
        for &kind in &self.refusals {
            let status = kind.status().as_u16().to_string();
            let response = operation
                .responses
                .responses
                .entry(status)
                .or_insert_with(|| RefOr::T(Response::new(String::new())));
            let RefOr::T(response) = response else {
                continue;
            };
            add_refusal(response, kind);
            if says_when_to_retry(kind) {
                response
                    .headers
                    .entry("retry-after".to_owned())
                    .or_insert_with(|| {
                        header(
                            Type::Integer,
                            "Seconds to wait before trying again, on the refusals that say when",
                        )
                    });
            }
            if kind == RejectionKind::IdempotentRequestInProgress
                && let Some((name, seconds)) =
                    self.replay.as_ref().and_then(|r| r.retention.as_ref())
            {
                response
                    .headers
                    .insert(name.to_string(), retention_header(*seconds));
            }
        }
    }
}

/// Whether a refusal of `kind` carries `Retry-After`.
fn says_when_to_retry(kind: RejectionKind) -> bool {
    matches!(
        kind,
        RejectionKind::Duplicate
            | RejectionKind::IdempotentRequestInProgress
            | RejectionKind::StoreUnavailable
            | RejectionKind::ShuttingDown
            | RejectionKind::Busy
    )
}

/// The statuses the operation documents that `replay` keeps, before any refusal is added.
fn stored_statuses(operation: &Operation, replay: Option<&Replay>) -> Vec<String> {
    let Some(replay) = replay else {
        return Vec::new();
    };
    operation
        .responses
        .responses
        .keys()
        .filter(|status| {
            status
                .parse::<u16>()
                .ok()
                .and_then(|code| StatusCode::from_u16(code).ok())
                .is_some_and(|code| (replay.stores)(code))
        })
        .cloned()
        .collect()
}

/// Adds the replay marker, and the advertised retention, to the responses in `stored`.
fn mark_replays(operation: &mut Operation, replay: &Replay, stored: &[String]) {
    for status in stored {
        let Some(RefOr::T(response)) = operation.responses.responses.get_mut(status) else {
            continue;
        };
        response.headers.insert(
            replay.header.to_string(),
            header(
                Type::String,
                "`true` when this response is the one kept from the first request with this \
                 key, replayed; absent on the first response",
            ),
        );
        if let Some((name, seconds)) = &replay.retention {
            response
                .headers
                .insert(name.to_string(), retention_header(*seconds));
        }
    }
}

/// The advertised retention's header.
fn retention_header(seconds: u64) -> RefOr<Header> {
    header(
        Type::Integer,
        &format!(
            "How long the key's answer is kept, in seconds: {seconds}. Retry with the same \
             key within it."
        ),
    )
}

fn header(schema_type: Type, description: &str) -> RefOr<Header> {
    let mut header = Header::new(ObjectBuilder::new().schema_type(schema_type));
    header.description = Some(description.to_owned());
    RefOr::T(header)
}

/// Adds the problem of `kind` to `response`: its title to the description, its type URL
/// to the `type` values of the problem JSON.
fn add_refusal(response: &mut Response, kind: RejectionKind) {
    let line = format!("{} (`{}`)", kind.title(), kind.code());
    if response.description.is_empty() {
        response.description = line;
    } else if !response.description.contains(&line) {
        response.description = format!("{}; {line}", response.description);
    }
    response
        .content
        .entry("text/html".to_owned())
        .or_insert_with(|| {
            RefOr::T(Content::new(Some(
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .description(Some(REFUSAL_PAGE)),
            )))
        });
    let content = response
        .content
        .entry(PROBLEM_JSON.to_owned())
        .or_insert_with(|| RefOr::T(Content::new(Some(problem_schema(kind.status())))));
    if let RefOr::T(content) = content
        && let Some(RefOr::T(Schema::Object(problem))) = &mut content.schema
        && let Some(RefOr::T(Schema::Object(type_uri))) = problem.properties.get_mut("type")
    {
        let values = type_uri.enum_values.get_or_insert_with(Vec::new);
        let uri = Value::from(kind.type_uri());
        if !values.contains(&uri) {
            values.push(uri);
        }
    }
}

/// RFC 9457 problem details as the guards render them; `type` takes its values as
/// refusals are added.
fn problem_schema(status: StatusCode) -> Schema {
    let string = |description: &str| {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .description(Some(description))
    };
    let problem: Object = ObjectBuilder::new()
        .schema_type(Type::Object)
        .property(
            "type",
            string("The refusal's section of the refusals guide: what it means, what to do")
                .enum_values(Some(Vec::<Value>::new())),
        )
        .required("type")
        .property("title", string("A fixed summary of the refusal"))
        .required("title")
        .property(
            "status",
            ObjectBuilder::new()
                .schema_type(Type::Integer)
                .enum_values(Some([status.as_u16()])),
        )
        .required("status")
        .property("detail", string("What happened to this request"))
        .required("detail")
        .build();
    Schema::Object(problem)
}

fn key_parameter(key: &KeyParameter) -> Parameter {
    let description = "A value unique to this operation, sent unchanged with every retry of \
                       it: 1 to 255 printable ASCII characters, as a structured-field string \
                       (`\"…\"`) or bare. A retry gets the first response back.";
    ParameterBuilder::new()
        .name(key.name.as_str())
        .parameter_in(ParameterIn::Header)
        .required(if key.required {
            Required::True
        } else {
            Required::False
        })
        .description(Some(description))
        .schema(Some(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .min_length(Some(1)),
        ))
        .build()
}

fn form_token_header(form: &FormTokenField) -> Parameter {
    ParameterBuilder::new()
        .name(form.header.as_str())
        .parameter_in(ParameterIn::Header)
        .required(Required::False)
        .description(Some(format!(
            "The form's one-time token, instead of the `{}` field",
            form.field
        )))
        .schema(Some(ObjectBuilder::new().schema_type(Type::String)))
        .build()
}

/// Adds `parameter`, unless the operation has one of its name and place already.
fn add_parameter(operation: &mut Operation, parameter: Parameter) {
    let parameters = operation.parameters.get_or_insert_with(Vec::new);
    let same = |p: &RefOr<Parameter>| {
        matches!(p, RefOr::T(p) if p.name.eq_ignore_ascii_case(&parameter.name)
            && p.parameter_in == parameter.parameter_in)
    };
    if !parameters.iter().any(same) {
        parameters.push(RefOr::T(parameter));
    }
}

/// Adds the token field to the form bodies of the operation, or, if it documents none, an
/// urlencoded body with the field.
fn add_form_field(operation: &mut Operation, field: &str) {
    let body = operation
        .request_body
        .get_or_insert_with(|| RefOr::T(RequestBody::new()));
    // A body by reference is the document's own: left as it is.
    let RefOr::T(body) = body else {
        return;
    };
    if !body
        .content
        .keys()
        .any(|media| FORM_TYPES.contains(&media.as_str()))
    {
        body.content.insert(
            FORM_TYPES[0].to_owned(),
            RefOr::T(Content::new(None::<Schema>)),
        );
    }
    for (media, content) in &mut body.content {
        if let RefOr::T(content) = content
            && FORM_TYPES.contains(&media.as_str())
        {
            content.schema = Some(with_field(content.schema.take(), field));
        }
    }
}

/// `schema` with the string property `field`: added to an inline object, or beside any
/// other schema with `allOf`.
fn with_field(schema: Option<RefOr<Schema>>, field: &str) -> RefOr<Schema> {
    let token = ObjectBuilder::new()
        .schema_type(Type::String)
        .description(Some(
            "The form's one-time token, as the page that issued the form gave it; spent by \
             this request",
        ));
    match schema {
        Some(RefOr::T(Schema::Object(mut object))) if object.schema_type == Type::Object.into() => {
            object.properties.insert(field.to_owned(), token.into());
            RefOr::T(Schema::Object(object))
        }
        None => RefOr::T(Schema::Object(
            ObjectBuilder::new()
                .schema_type(Type::Object)
                .property(field, token)
                .build(),
        )),
        Some(other) => RefOr::T(Schema::AllOf(
            AllOfBuilder::new()
                .item(other)
                .item(ObjectBuilder::new().property(field, token))
                .build(),
        )),
    }
}
