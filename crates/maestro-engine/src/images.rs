//! Images tool results show the model: kept once beside the run's record under their hash
//! (`<run dir>/images/<sha256>`), named in the `tool_result` event by [`ImageRef`], and read
//! back when a resumed or replayed run rebuilds the same request.

use std::path::{Path, PathBuf};

use maestro_llm::ImagePart;
use maestro_protocol::ImageRef;
use maestro_tools::attach::ToolImage;
use maestro_tools::regular_file::{self, Access, Create};

/// `<run dir>/images/`.
pub(crate) fn dir(run_dir: &Path) -> PathBuf {
    run_dir.join("images")
}

/// The image as a message part and as the record names it. The bytes are written once under
/// their hash; `Err` says why they could not be (the image is still shown this time).
pub(crate) fn keep(run_dir: &Path, image: ToolImage) -> (ImagePart, ImageRef, Result<(), String>) {
    let part = ImagePart::new(image.media_type, image.width, image.height, image.data);
    let reference = ImageRef {
        sha256: part.sha256.clone(),
        media_type: part.media_type.clone(),
        width: part.width,
        height: part.height,
    };
    let dir = dir(run_dir);
    let path = dir.join(&part.sha256);
    let kept = if path.is_file() {
        Ok(())
    } else {
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))
            .and_then(|()| {
                regular_file::write(&path, &part.data, Create::OrTruncate).map_err(|e| {
                    format!(
                        "cannot keep the image beside the record: {}",
                        e.explain(&path.display().to_string(), "the run record", Access::Write)
                    )
                })
            })
    };
    (part, reference, kept)
}

/// The recorded image read back; `Err` says which file is missing or altered and what to do.
pub(crate) fn load(run_dir: &Path, reference: &ImageRef) -> Result<ImagePart, String> {
    let path = dir(run_dir).join(&reference.sha256);
    let data = std::fs::read(&path).map_err(|e| {
        format!(
            "the image this result showed (sha256 {}) cannot be read from {}: {e}; call the \
             tool again to see it",
            reference.sha256,
            path.display()
        )
    })?;
    let part = ImagePart::new(
        reference.media_type.clone(),
        reference.width,
        reference.height,
        data,
    );
    if part.sha256 != reference.sha256 {
        return Err(format!(
            "the image file {} no longer has the recorded hash {}; call the tool again to see it",
            path.display(),
            reference.sha256
        ));
    }
    Ok(part)
}
