use axum::Router;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::post;
use idem_axum::avoid_repeat;

#[avoid_repeat(timeout = "30s")]
async fn fallible(body: String) -> Result<String, (StatusCode, &'static str)> {
    let n: u32 = body.parse().map_err(|_| (StatusCode::BAD_REQUEST, "not a number"))?;
    if n == 0 {
        return Err((StatusCode::UNPROCESSABLE_ENTITY, "zero"));
    }
    Ok((n * 2).to_string())
}

#[avoid_repeat(timeout = "30s")]
async fn opaque() -> impl IntoResponse {
    (StatusCode::CREATED, "created")
}

fn main() {
    let _: Router = Router::new().route("/a", post(fallible)).route("/b", post(opaque));
}
