//! The scripts, styles and icon under `assets/`, embedded in the binary: the UI works offline
//! and needs no files beside the binary.

/// One embedded file.
pub(crate) struct Asset {
    pub(crate) body: &'static str,
    pub(crate) content_type: &'static str,
}

impl Asset {
    /// A validator that changes when the file does (FNV-1a of its bytes).
    pub(crate) fn etag(&self) -> String {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for b in self.body.bytes() {
            hash ^= u64::from(b);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        format!("\"{hash:016x}\"")
    }
}

macro_rules! assets {
    ($($name:literal => $type:expr),* $(,)?) => {
        /// The embedded file called `name`.
        pub(crate) fn get(name: &str) -> Option<Asset> {
            match name {
                $($name => Some(Asset {
                    body: include_str!(concat!("../assets/", $name)),
                    content_type: $type,
                }),)*
                _ => None,
            }
        }

        /// Every embedded file's name.
        #[cfg(test)]
        pub(crate) const NAMES: &[&str] = &[$($name),*];
    };
}

const JS: &str = "text/javascript; charset=utf-8";

assets! {
    "app.css" => "text/css; charset=utf-8",
    "icon.svg" => "image/svg+xml",
    "lib.js" => JS,
    "submit.js" => JS,
    "jobs.js" => JS,
    "job.js" => JS,
    "pieces.js" => JS,
    "piece.js" => JS,
    "diagram.js" => JS,
    "schedules.js" => JS,
    "config.js" => JS,
    "admin.js" => JS,
    "login.js" => JS,
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_asset_is_embedded_and_scripts_hold_no_html_sinks() {
        for name in super::NAMES {
            let asset = super::get(name).unwrap_or_else(|| panic!("{name} is not embedded"));
            if name.ends_with(".js") {
                // The pages build the DOM from text; the one sanitised HTML (a job's result)
                // goes in through lib.js's `sanitisedHtml`, and nothing else may.
                let sinks = asset.body.matches("innerHTML").count()
                    + asset.body.matches("outerHTML").count()
                    + asset.body.matches("insertAdjacentHTML").count()
                    + asset.body.matches("document.write").count()
                    + asset.body.matches("eval(").count();
                let allowed = usize::from(*name == "lib.js");
                assert_eq!(sinks, allowed, "{name} uses an HTML sink");
            }
        }
    }
}
