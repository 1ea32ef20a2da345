//! `ReadImage` and `AnnotateImage`: the file is resolved in the workspace and read here; the
//! reader child decodes it (EXIF rotation applied), resizes it or draws on a copy, under its
//! memory and CPU limits.

use std::sync::Arc;

use base64::Engine as _;
use maestro_tools::attach::{ToolImage, attach_image};
use maestro_tools::regular_file::{self, Access, Create};
use maestro_tools::{ToolContext, ToolOutput, TypedTool, Workspace};
use schemars::JsonSchema;
use serde::Deserialize;

use crate::error::DocError;
use crate::image::{ImageAnswer, ImageJob, Shape};
use crate::office::file_bytes;
use crate::protocol::{Kind, Request, Response};
use crate::{DocumentsConfig, reader};

/// Sends `bytes` to the child with `job` and returns the image it made.
async fn image_job(
    config: &DocumentsConfig,
    ctx: &ToolContext,
    rel: &str,
    job: ImageJob,
    bytes: Vec<u8>,
) -> Result<(ImageAnswer, Vec<u8>), DocError> {
    let request = Request {
        kind: Kind::Image,
        shown: rel.to_string(),
        sheet: None,
        range: None,
        memory_mb: config.memory_mb,
        cpu_secs: config.cpu_secs,
        max_expanded_bytes: config.max_expanded_bytes,
        // The answer carries an encoded image in base64: room for 64 MiB of it.
        max_chars: 8 * 1024 * 1024,
        image: Some(job),
    };
    match reader::exchange(&config.reader, &request, bytes, config.timeout, &ctx.cancel).await? {
        Response::Image(answer) => {
            let data = base64::engine::general_purpose::STANDARD
                .decode(answer.data.as_bytes())
                .map_err(|e| DocError::BadAnswer(format!("the image is not base64: {e}")))?;
            Ok((*answer, data))
        }
        Response::Failed(failure) => Err(DocError::Read(failure)),
        Response::Markdown(_) => Err(DocError::BadAnswer(
            "Markdown where an image was asked for".into(),
        )),
    }
}

fn refused(tool: &str, rel: &str, error: &DocError) -> ToolOutput {
    ToolOutput::error(format!("{tool} cannot use `{rel}`: {error}"))
}

/// `ReadImage`: shows an image of the workspace to the model.
pub(crate) struct ReadImage(pub(crate) Arc<DocumentsConfig>);

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReadImageInput {
    /// path of the PNG or JPEG file in the workspace
    file_path: String,
}

impl TypedTool for ReadImage {
    type Input = ReadImageInput;
    const NAME: &'static str = "ReadImage";
    const DESCRIPTION: &'static str = "Look at a PNG or JPEG image of the workspace (rotated as its EXIF says, shrunk to fit) and get its size and format.";

    async fn run(&self, ctx: &ToolContext, input: ReadImageInput) -> ToolOutput {
        let config = &self.0;
        let rel = input.file_path.as_str();
        let made = async {
            let bytes = file_bytes(ctx, rel, Self::NAME, config.max_file_bytes).await?;
            let size = bytes.len();
            let job = ImageJob::Read {
                max_side: config.image_max_side,
            };
            image_job(config, ctx, rel, job, bytes)
                .await
                .map(|(a, d)| (a, d, size))
        };
        let (answer, data, size) = match made.await {
            Ok(made) => made,
            Err(e) => return refused(Self::NAME, rel, &e),
        };
        let mut text = format!(
            "{rel}: {} image, {}×{} px, {size} bytes",
            answer.format, answer.original_width, answer.original_height
        );
        if let Some(rotation) = &answer.rotation {
            text.push_str(&format!(
                " (stored as {}×{} px with EXIF orientation {rotation}, shown upright)",
                answer.stored_width, answer.stored_height
            ));
        }
        if (answer.width, answer.height) != (answer.original_width, answer.original_height) {
            text.push_str(&format!(
                ".\nShown shrunk to {}×{} px (tools.image_max_side {}); AnnotateImage takes \
                 coordinates in the original's pixels: multiply what you see by {:.3}",
                answer.width,
                answer.height,
                config.image_max_side,
                f64::from(answer.original_width) / f64::from(answer.width.max(1))
            ));
        }
        text.push('.');
        let shown = attach_image(ToolImage {
            media_type: answer.media_type.clone(),
            width: answer.width,
            height: answer.height,
            data,
        });
        if !shown {
            text.push_str("\n(The image itself is shown only to a run's model.)");
        }
        ToolOutput::ok(text)
    }
}

/// `AnnotateImage`: draws boxes, arrows, ellipses and text on a copy of an image.
pub(crate) struct AnnotateImage(pub(crate) Arc<DocumentsConfig>);

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct AnnotateImageInput {
    /// path of the PNG or JPEG file to annotate, in the workspace (it is not changed)
    file_path: String,
    /// what to draw, in order, in pixels of the original image (upright, as ReadImage reports its size)
    shapes: Vec<Shape>,
    /// where to write the annotated copy (.png or .jpg), inside a writable folder such as output/
    output_path: String,
}

impl AnnotateImage {
    async fn annotate(
        &self,
        ctx: &ToolContext,
        input: AnnotateImageInput,
    ) -> Result<String, DocError> {
        let config = &self.0;
        if !ctx.edit {
            return Err(DocError::Input(
                "AnnotateImage writes a new file, which this movement may not: it needs `edit: true`"
                    .into(),
            ));
        }
        if input.shapes.is_empty() {
            return Err(DocError::Input(
                "shapes is empty; give at least one box, arrow, ellipse or text".into(),
            ));
        }
        let lower = input.output_path.to_ascii_lowercase();
        let format = if lower.ends_with(".png") {
            "png"
        } else if lower.ends_with(".jpg") || lower.ends_with(".jpeg") {
            "jpeg"
        } else {
            return Err(DocError::Input(format!(
                "output_path {:?} must end in .png or .jpg",
                input.output_path
            )));
        };
        let writable = ctx.writable_dirs(&config.writable_dirs).into_owned();
        let ws = Workspace::open(&ctx.workspace).map_err(|e| DocError::File(e.into()))?;
        let target = ws
            .resolve_writable(&input.output_path, &writable)
            .map_err(|e| DocError::File(e.into()))?;
        let bytes = file_bytes(
            ctx,
            &input.file_path,
            "AnnotateImage",
            config.max_file_bytes,
        )
        .await?;
        let count = input.shapes.len();
        let job = ImageJob::Annotate {
            shapes: input.shapes,
            format: format.into(),
        };
        let (answer, data) = image_job(config, ctx, &input.file_path, job, bytes).await?;
        if let Some(parent) = target.abs.parent() {
            std::fs::create_dir_all(parent).map_err(DocError::Io)?;
        }
        let shown = target.display().to_string();
        let (abs, len) = (target.abs.clone(), data.len());
        maestro_tools::off_runtime(move || regular_file::write(&abs, &data, Create::OrTruncate))
            .await
            .map_err(|e| DocError::Input(e.explain(&shown, "AnnotateImage", Access::Write)))?;
        Ok(format!(
            "wrote `{shown}`: {} {}×{} px with {count} shape(s), {len} bytes; ReadImage shows it",
            answer.media_type, answer.width, answer.height
        ))
    }
}

impl TypedTool for AnnotateImage {
    type Input = AnnotateImageInput;
    const NAME: &'static str = "AnnotateImage";
    const DESCRIPTION: &'static str = "Draw boxes, arrows, ellipses and labels on a copy of an image and write it to a writable folder.";

    async fn run(&self, ctx: &ToolContext, input: AnnotateImageInput) -> ToolOutput {
        let rel = input.file_path.clone();
        match self.annotate(ctx, input).await {
            Ok(text) => ToolOutput::ok(text),
            Err(e) => refused(Self::NAME, &rel, &e),
        }
    }
}
