//! The pages' HTML shells: the landmarks, navigation and heading every page shares, and the
//! script that builds the page from the API. A shell holds nothing of any job, so it is the same
//! for every user and safe to cache.

use axum::response::{Html, IntoResponse, Response};
use maud::{DOCTYPE, Markup, html};

/// A page of the UI, each at a stable URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Page {
    /// `/`: submit a task.
    Submit,
    /// `/jobs`: the job list.
    Jobs,
    /// `/jobs/{id}`: one job, live.
    Job,
    /// `/pieces`: the pieces.
    Pieces,
    /// `/pieces/{name}`: the piece editor.
    Piece,
    /// `/schedules`.
    Schedules,
    /// `/config`: the runtime configuration.
    Config,
    /// `/admin`: users, tokens, workers, audit.
    Admin,
    /// `/login`: how to log in, and why a page needs it.
    Login,
    /// `/share/{token}`: a shared job, read-only.
    Share,
    /// Nothing here.
    NotFound,
}

/// The navigation's entries: path, label, and the page it marks as current.
const NAV: &[(&str, &str, Page)] = &[
    ("/", "New task", Page::Submit),
    ("/jobs", "Jobs", Page::Jobs),
    ("/pieces", "Pieces", Page::Pieces),
    ("/schedules", "Schedules", Page::Schedules),
    ("/config", "Config", Page::Config),
    ("/admin", "Admin", Page::Admin),
];

impl Page {
    /// The page's title and heading.
    fn title(self) -> &'static str {
        match self {
            Page::Submit => "New task",
            Page::Jobs => "Jobs",
            Page::Job => "Job",
            Page::Pieces => "Pieces",
            Page::Piece => "Piece",
            Page::Schedules => "Schedules",
            Page::Config => "Configuration",
            Page::Admin => "Administration",
            Page::Login => "Log in",
            Page::Share => "Shared job",
            Page::NotFound => "Not found",
        }
    }

    /// The module that builds the page (`/ui/NAME.js`).
    fn script(self) -> Option<&'static str> {
        Some(match self {
            Page::Submit => "submit.js",
            Page::Jobs => "jobs.js",
            Page::Job | Page::Share => "job.js",
            Page::Pieces => "pieces.js",
            Page::Piece => "piece.js",
            Page::Schedules => "schedules.js",
            Page::Config => "config.js",
            Page::Admin => "admin.js",
            Page::Login => "login.js",
            Page::NotFound => return None,
        })
    }

    /// The page's shell as an HTML response.
    pub fn render(self) -> Response {
        Html(self.markup().into_string()).into_response()
    }

    fn markup(self) -> Markup {
        let public = matches!(self, Page::Share | Page::Login);
        html! {
            (DOCTYPE)
            html lang="en" {
                head {
                    meta charset="utf-8";
                    meta name="viewport" content="width=device-width, initial-scale=1";
                    meta name="color-scheme" content="light dark";
                    meta name="referrer" content="no-referrer";
                    title { (self.title()) " · Maestro" }
                    link rel="icon" href="/ui/icon.svg" type="image/svg+xml";
                    link rel="stylesheet" href="/ui/app.css";
                    @if let Some(script) = self.script() {
                        script type="module" src={ "/ui/" (script) } {}
                    }
                }
                body data-page=(format!("{self:?}").to_lowercase()) {
                    a.skip href="#main" { "Skip to content" }
                    header.top {
                        nav aria-label="Main" {
                            a.brand href="/" { "Maestro" }
                            @if !public {
                                ul.nav {
                                    @for (path, label, page) in NAV {
                                        li {
                                            @if *page == self {
                                                a href=(path) aria-current="page" { (label) }
                                            } @else {
                                                a href=(path) { (label) }
                                            }
                                        }
                                    }
                                }
                                div #whoami {}
                            }
                        }
                    }
                    main #main tabindex="-1" {
                        h1 #title { (self.title()) }
                        div #status role="status" aria-live="polite" {}
                        div #app {
                            @if self == Page::NotFound {
                                p { "Nothing is here. " a href="/jobs" { "See the jobs" } "." }
                            }
                        }
                    }
                    noscript { p.notice { "Maestro's pages need JavaScript." } }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Page;

    #[test]
    fn shells_have_landmarks_a_heading_and_no_inline_script() {
        for page in [Page::Submit, Page::Job, Page::Share, Page::NotFound] {
            let html = page.markup().into_string();
            assert!(
                html.starts_with("<!DOCTYPE html><html lang=\"en\">"),
                "{html}"
            );
            assert!(html.contains("<main id=\"main\""), "{html}");
            assert!(html.contains("<h1 id=\"title\">"), "{html}");
            assert!(!html.contains("<script>"), "inline script in {page:?}");
            assert!(!html.contains("style="), "inline style in {page:?}");
        }
        let submit = Page::Submit.markup().into_string();
        assert!(submit.contains("<a href=\"/\" aria-current=\"page\">New task</a>"));
        assert!(submit.contains("src=\"/ui/submit.js\""));
        // A share link's viewer is not logged in: no navigation to pages that need it.
        assert!(!Page::Share.markup().into_string().contains("/admin"));
    }
}
