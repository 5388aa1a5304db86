//! The default rendering of a [`Rejection`]: problem JSON or a small HTML page, chosen by
//! the request's `Accept`.

use axum::response::{IntoResponse, Response};
use http::header::{ACCEPT, CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, HeaderValue};

use super::Rejection;

/// RFC 9457 problem details; `type` is the URL of the kind's section in the refusals guide
/// on docs.rs, a page that says what the refusal means and what to do next.
#[derive(serde::Serialize)]
struct Problem<'a> {
    r#type: &'static str,
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
            r#type: kind.type_uri(),
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
            // A malformed weight, or one outside 0 to 1, counts as 0: such a range prefers
            // nothing. The parameter's name is case-insensitive.
            let q = params
                .find_map(|p| p.trim().strip_prefix(['q', 'Q'])?.strip_prefix('='))
                .map_or(1.0, |q| {
                    let q = q.trim().parse::<f32>().unwrap_or(0.0);
                    if (0.0..=1.0).contains(&q) { q } else { 0.0 }
                });
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
    fn a_weight_that_is_no_qvalue_counts_as_zero() {
        for weight in ["2", "inf", "NaN", "-1"] {
            let value = format!("text/html;q={weight}, application/json;q=0.5");
            assert!(!prefers_html(&accept(&value)), "{value}");
        }
        assert!(!prefers_html(&accept(
            "text/html;Q=0.1, application/json;q=0.5"
        )));
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
                "type": concat!(
                    "https://docs.rs/idem-axum/",
                    env!("CARGO_PKG_VERSION"),
                    "/idem_axum/guide/refusals/index.html#duplicate-request"
                ),
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

    mod properties {
        use proptest::prelude::*;

        use super::*;

        /// A weight as a client may write it, and its value.
        fn weight() -> impl Strategy<Value = (String, f32)> {
            prop_oneof![
                Just((String::new(), 1.0)),
                (0_u16..=1000, any::<bool>(), 0_usize..3).prop_map(
                    |(thousandths, upper, digits)| {
                        let q = if upper { "Q" } else { "q" };
                        let text = match thousandths {
                            1000 => format!("1.{}", "0".repeat(digits)),
                            _ => format!("{:.3}", f32::from(thousandths) / 1000.0),
                        };
                        let value = text.parse::<f32>().expect("a number");
                        (format!(";{q}={text}"), value)
                    }
                ),
            ]
        }

        proptest! {
            #[test]
            fn no_accept_field_makes_it_panic(
                lines in crate::field_lines::field_lines(59, 3),
            ) {
                let mut headers = HeaderMap::new();
                for line in lines {
                    headers.append(ACCEPT, HeaderValue::from_bytes(&line).expect("a field value"));
                }
                let _ = prefers_html(&headers);
            }

            /// HTML is preferred exactly when the highest weight of an HTML range is above
            /// the highest of a JSON one (`*/*` included).
            #[test]
            fn html_is_preferred_when_it_weighs_more(
                ranges in prop::collection::vec(
                    (
                        prop::sample::select(
                            &[
                                "text/html",
                                "application/xhtml+xml",
                                "application/json",
                                "application/problem+json",
                                "*/*",
                                "image/png",
                            ][..],
                        ),
                        weight(),
                    ),
                    0..5,
                ),
            ) {
                let (mut html, mut json) = (0.0_f32, 0.0_f32);
                for (media, (_, q)) in &ranges {
                    match *media {
                        "text/html" | "application/xhtml+xml" => html = html.max(*q),
                        "image/png" => {}
                        _ => json = json.max(*q),
                    }
                }
                let value: Vec<String> = ranges
                    .iter()
                    .map(|(media, (weight, _))| format!("{media}{weight}"))
                    .collect();
                prop_assert_eq!(prefers_html(&accept(&value.join(", "))), html > json);
            }

            /// Escaped text holds no markup character, and unescapes to itself.
            #[test]
            fn escaped_text_is_inert_and_lossless(text in any::<String>()) {
                let escaped = escape_html(&text);
                prop_assert!(!escaped.contains(['<', '>', '"', '\'']), "{escaped}");
                let unescaped = escaped
                    .replace("&lt;", "<")
                    .replace("&gt;", ">")
                    .replace("&quot;", "\"")
                    .replace("&#39;", "'")
                    .replace("&amp;", "&");
                prop_assert_eq!(unescaped, text);
            }
        }
    }
}
