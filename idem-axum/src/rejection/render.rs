//! The default rendering of a [`Rejection`]: problem JSON or a small HTML page, chosen by
//! the request's `Accept`.

use axum::response::{IntoResponse, Response};
use http::header::{ACCEPT, CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, HeaderValue};

use super::Rejection;

/// RFC 9457 problem details; `type` is a `tag:` URI that names the kind without pretending
/// to be a page.
#[derive(serde::Serialize)]
struct Problem<'a> {
    r#type: String,
    title: &'a str,
    status: u16,
    detail: &'a str,
}

pub(super) fn render(rejection: &Rejection) -> Response {
    let kind = rejection.kind();
    let mut response = if rejection.prefers_html() {
        let page = format!(
            "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{title}</title></head>\
             <body><h1>{title}</h1><p>{detail}</p></body></html>\n",
            title = escape_html(kind.title()),
            detail = escape_html(rejection.detail()),
        );
        (
            kind.status(),
            [(CONTENT_TYPE, "text/html; charset=utf-8")],
            page,
        )
            .into_response()
    } else {
        let problem = Problem {
            r#type: format!("tag:idem-rs,2026:{}", kind.code()),
            title: kind.title(),
            status: kind.status().as_u16(),
            detail: rejection.detail(),
        };
        // Serialising four plain fields cannot fail.
        let body = serde_json::to_vec(&problem).unwrap_or_default();
        (
            kind.status(),
            [(CONTENT_TYPE, "application/problem+json")],
            body,
        )
            .into_response()
    };
    if let Some(secs) = rejection.retry_after_secs() {
        response
            .headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from(secs));
    }
    response
}

/// `text` with `& < > " '` escaped, fit for HTML text and quoted attribute values.
pub(crate) fn escape_html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Whether `Accept` ranks HTML strictly above JSON. Browsers send
/// `text/html,…,*/*;q=0.8`; API clients send `application/json`, `*/*`, or nothing, and
/// get JSON.
pub(crate) fn prefers_html(headers: &HeaderMap) -> bool {
    let (mut html, mut json) = (0.0_f32, 0.0_f32);
    for value in headers.get_all(ACCEPT) {
        let Ok(value) = value.to_str() else { continue };
        for range in value.split(',') {
            let mut params = range.split(';');
            let media = params.next().unwrap_or("").trim().to_ascii_lowercase();
            // A malformed weight counts as 0: such a range prefers nothing.
            let q = params
                .find_map(|p| p.trim().strip_prefix("q="))
                .map_or(1.0, |q| q.trim().parse::<f32>().unwrap_or(0.0));
            match media.as_str() {
                "text/html" | "application/xhtml+xml" => html = html.max(q),
                "application/json" | "application/problem+json" | "*/*" => json = json.max(q),
                _ => {}
            }
        }
    }
    html > json
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RejectionKind;

    fn accept(value: &str) -> HeaderMap {
        HeaderMap::from_iter([(ACCEPT, HeaderValue::from_str(value).unwrap())])
    }

    #[test]
    fn browsers_get_html_and_api_clients_json() {
        let browser = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8";
        assert!(prefers_html(&accept(browser)));
        assert!(!prefers_html(&accept("application/json")));
        assert!(!prefers_html(&accept("*/*")));
        assert!(!prefers_html(&HeaderMap::new()));
        assert!(!prefers_html(&accept("text/html;q=0.5, application/json")));
        assert!(!prefers_html(&accept("garbage;;q=x, text/html;q=abc")));
    }

    #[test]
    fn html_escapes_the_message() {
        let response = Rejection::new(
            RejectionKind::Duplicate,
            "<script>alert('x')</script> & more",
        )
        .with_html(true)
        .into_response();
        assert_eq!(response.headers()[CONTENT_TYPE], "text/html; charset=utf-8");
        let body = futures_body(response);
        assert!(
            body.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; more"),
            "{body}"
        );
        assert!(!body.contains("<script>"));
    }

    #[test]
    fn problem_json_has_type_title_status_detail_and_retry_after() {
        let response = Rejection::new(RejectionKind::Duplicate, "请勿重复提交")
            .with_retry_after(std::time::Duration::from_millis(29_001))
            .into_response();
        assert_eq!(response.status(), 409);
        assert_eq!(response.headers()[RETRY_AFTER], "30");
        let body: serde_json::Value = serde_json::from_str(&futures_body(response)).unwrap();
        assert_eq!(
            body,
            serde_json::json!({
                "type": "tag:idem-rs,2026:duplicate-request",
                "title": "Duplicate request",
                "status": 409,
                "detail": "请勿重复提交",
            })
        );
    }

    fn futures_body(response: Response) -> String {
        let bytes = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(axum::body::to_bytes(response.into_body(), usize::MAX))
            .unwrap();
        String::from_utf8(bytes.to_vec()).unwrap()
    }
}
