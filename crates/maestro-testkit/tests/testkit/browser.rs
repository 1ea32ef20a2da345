//! The test browser: Chromium started through chromedriver shows a page served on 127.0.0.1 at
//! both viewports, takes screenshots, saves a download, sees a dialog a script opened, runs
//! axe-core, and leaves no process behind.

use std::time::Duration;

use axum::Router;
use axum::http::header;
use axum::response::{Html, IntoResponse};
use axum::routing::get;
use maestro_testkit::{Browser, Viewport, listen_loopback};

const WAIT: Duration = Duration::from_secs(20);

const GOOD: &str = "<!DOCTYPE html><html lang=\"en\"><head><title>Good</title></head><body>\
    <main><h1 id=\"title\">A good page</h1>\
    <p><a id=\"get\" href=\"/file.txt\" download>the file</a></p></main></body></html>";

const BAD: &str = "<!DOCTYPE html><html><head><title>Bad</title></head><body>\
    <img src=\"/nothing.png\"><input type=\"text\"></body></html>";

const ALERT: &str = "<!DOCTYPE html><html lang=\"en\"><head><title>Alert</title></head><body>\
    <main><h1>Alert</h1><script>alert(\"a script ran\")</script></main></body></html>";

const FILE: &[u8] = b"downloaded bytes\n\x00\x01\x02";

async fn serve() -> String {
    let app = Router::new()
        .route("/", get(|| async { Html(GOOD) }))
        .route("/bad", get(|| async { Html(BAD) }))
        .route("/alert", get(|| async { Html(ALERT) }))
        .route(
            "/file.txt",
            get(|| async {
                (
                    [
                        (header::CONTENT_TYPE, "application/octet-stream"),
                        (
                            header::CONTENT_DISPOSITION,
                            "attachment; filename=\"file.txt\"",
                        ),
                    ],
                    FILE,
                )
                    .into_response()
            }),
        );
    let listener = listen_loopback().unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    base
}

fn group_alive(pgid: u32) -> bool {
    std::process::Command::new("kill")
        .args(["-0", "--", &format!("-{pgid}")])
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap()
        .success()
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    no_chromium,
    ignore = "needs chromium, chromium-driver and axe-core: scripts/prerequisites.sh"
)]
async fn a_page_is_shown_downloaded_from_checked_and_the_browser_goes_away() {
    let base = serve().await;
    let browser = Browser::start("testkit_browser", Viewport::Desktop)
        .await
        .unwrap();
    let group = browser.chromium_processes();
    assert!(
        group.iter().any(|(_, cmd)| cmd.contains("--type=renderer")),
        "Chromium's renderer runs in the browser's process group: {group:?}"
    );
    browser.goto(&format!("{base}/")).await.unwrap();
    assert_eq!(browser.text("#title", WAIT).await.unwrap(), "A good page");
    let size = browser
        .execute("return [innerWidth, innerHeight]", vec![])
        .await
        .unwrap();
    assert_eq!(size, serde_json::json!([1280, 900]));
    let shot = browser.screenshot("desktop").await.unwrap();
    assert!(shot.starts_with(browser.screenshot_dir()));
    assert!(std::fs::read(&shot).unwrap().starts_with(b"\x89PNG"));

    browser.set_viewport(Viewport::Phone).await.unwrap();
    let size = browser
        .execute("return [innerWidth, innerHeight]", vec![])
        .await
        .unwrap();
    assert_eq!(size, serde_json::json!([390, 844]));
    browser.screenshot("phone").await.unwrap();

    // A download lands in the browser's directory, byte for byte.
    browser.click("#get", WAIT).await.unwrap();
    assert_eq!(browser.download("file.txt", WAIT).await.unwrap(), FILE);

    // A clean page has nothing serious; one with an image without text and an unlabelled
    // input has.
    let found = browser.axe().await.unwrap();
    assert!(
        found.iter().all(|v| !v.is_serious()),
        "{}",
        found.iter().map(ToString::to_string).collect::<String>()
    );
    browser.goto(&format!("{base}/bad")).await.unwrap();
    let found = browser.axe().await.unwrap();
    let serious: Vec<&str> = found
        .iter()
        .filter(|v| v.is_serious())
        .map(|v| v.id.as_str())
        .collect();
    assert!(serious.contains(&"image-alt"), "{serious:?}");
    assert!(serious.contains(&"label"), "{serious:?}");
    let printed = found.iter().map(ToString::to_string).collect::<String>();
    assert!(printed.contains("<img src=\"/nothing.png\">"), "{printed}");

    // No dialog on a page without script; a script's alert() is seen.
    assert_eq!(browser.alert_present().await.unwrap(), None);
    browser.goto(&format!("{base}/alert")).await.unwrap_or(());
    assert_eq!(
        browser.alert_present().await.unwrap().as_deref(),
        Some("a script ran")
    );

    // Dropping the browser ends chromedriver and Chromium.
    let pgid = browser.chromium_processes()[0].0;
    let driver_group = std::fs::read_to_string(format!("/proc/{pgid}/stat"))
        .unwrap()
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .nth(2)
        .unwrap()
        .parse::<u32>()
        .unwrap();
    drop(browser);
    let started = std::time::Instant::now();
    while group_alive(driver_group) {
        assert!(
            started.elapsed() < WAIT,
            "chromedriver's group {driver_group} outlived the browser"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
