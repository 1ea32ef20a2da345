//! The image work of the reader child: decoding an untrusted image under its limits (EXIF
//! rotation applied), resizing it for the model (ReadImage), and drawing shapes and labels on a
//! copy (AnnotateImage). Runs only in the child, after its resource limits are set.

use std::io::Cursor;

use ab_glyph::{Font, FontRef, PxScale, ScaleFont};
use image::{DynamicImage, ImageDecoder, ImageError, ImageFormat, Rgba, RgbaImage};
use serde::{Deserialize, Serialize};

use crate::protocol::ReadFailure;

/// DejaVu Sans (Bitstream Vera licence, see `fonts/DejaVuSans-LICENSE.txt`), for labels.
const FONT: &[u8] = include_bytes!("../fonts/DejaVuSans.ttf");

/// The most pixels an image may have: more is refused before it is decoded (a decompression
/// bomb claims a huge size in a few bytes).
pub(crate) const MAX_PIXELS: u64 = 64_000_000;

/// What the child is asked to do with an image.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "job")]
pub(crate) enum ImageJob {
    /// Rotate as EXIF says, shrink to `max_side`, encode for the model.
    Read {
        /// The longest side the image may have after resizing.
        max_side: u32,
    },
    /// Draw `shapes` on a copy and encode it as `format`.
    Annotate {
        /// The shapes, in pixels of the original image (after EXIF rotation).
        shapes: Vec<Shape>,
        /// `png` or `jpeg`.
        format: String,
    },
}

/// One shape to draw.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Shape {
    /// box, arrow, ellipse or text
    pub(crate) kind: ShapeKind,
    /// pixels of the original image: [x1, y1, x2, y2] for box, ellipse and arrow (the arrow points at x2, y2); [x, y] for text (its top left corner)
    pub(crate) coordinates: Vec<f64>,
    /// text written beside the shape (for text: the text itself)
    #[serde(default)]
    pub(crate) label: Option<String>,
    /// a colour name (red, green, blue, yellow, orange, purple, white, black) or #rrggbb; default red
    #[serde(default)]
    pub(crate) color: Option<String>,
}

/// The kinds of shape AnnotateImage draws.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ShapeKind {
    /// A rectangle's outline.
    Box,
    /// A line with a head at its second point.
    Arrow,
    /// An ellipse's outline inside the rectangle.
    Ellipse,
    /// Text at a point.
    Text,
}

/// The image the child made, and what it knows about the original.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ImageAnswer {
    /// The encoded result, base64.
    pub(crate) data: String,
    /// Its media type.
    pub(crate) media_type: String,
    /// Its size.
    pub(crate) width: u32,
    /// Its size.
    pub(crate) height: u32,
    /// The file's format as read (`PNG`, `JPEG`, …).
    pub(crate) format: String,
    /// The original's size as stored, before rotation.
    pub(crate) stored_width: u32,
    /// The original's size as stored, before rotation.
    pub(crate) stored_height: u32,
    /// The EXIF orientation applied, when it was not the identity (e.g. `Rotate90`).
    pub(crate) rotation: Option<String>,
    /// The original's size after rotation: the pixels AnnotateImage's coordinates use.
    pub(crate) original_width: u32,
    /// The original's size after rotation.
    pub(crate) original_height: u32,
}

/// Runs `job` on the image `bytes`.
pub(crate) fn run(
    bytes: &[u8],
    job: &ImageJob,
    memory_mb: u64,
) -> Result<ImageAnswer, ReadFailure> {
    let decoded = decode(bytes, memory_mb)?;
    let (width, height) = (decoded.image.width(), decoded.image.height());
    let (image, format) = match job {
        ImageJob::Read { max_side } => {
            let max_side = (*max_side).max(16);
            let image = if width.max(height) > max_side {
                decoded
                    .image
                    .resize(max_side, max_side, image::imageops::FilterType::Triangle)
            } else {
                decoded.image
            };
            let format = if decoded.format == ImageFormat::Jpeg {
                ImageFormat::Jpeg
            } else {
                ImageFormat::Png
            };
            (image, format)
        }
        ImageJob::Annotate { shapes, format } => {
            let mut canvas = decoded.image.to_rgba8();
            draw(&mut canvas, shapes)?;
            let format = if format == "jpeg" {
                ImageFormat::Jpeg
            } else {
                ImageFormat::Png
            };
            (DynamicImage::ImageRgba8(canvas), format)
        }
    };
    let data = encode(&image, format)?;
    use base64::Engine as _;
    Ok(ImageAnswer {
        data: base64::engine::general_purpose::STANDARD.encode(&data),
        media_type: format.to_mime_type().to_string(),
        width: image.width(),
        height: image.height(),
        format: format_name(decoded.format),
        stored_width: decoded.stored.0,
        stored_height: decoded.stored.1,
        rotation: decoded.rotation,
        original_width: width,
        original_height: height,
    })
}

struct Decoded {
    image: DynamicImage,
    format: ImageFormat,
    stored: (u32, u32),
    rotation: Option<String>,
}

fn decode(bytes: &[u8], memory_mb: u64) -> Result<Decoded, ReadFailure> {
    let reader = image::ImageReader::new(Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|e| ReadFailure::Corrupt(format!("cannot read the image: {e}")))?;
    let Some(format) = reader.format() else {
        return Err(ReadFailure::WrongType(
            "this is not an image the tool reads (PNG or JPEG); convert it first".into(),
        ));
    };
    if !matches!(format, ImageFormat::Png | ImageFormat::Jpeg) {
        return Err(ReadFailure::WrongType(format!(
            "a {} image, which the tool does not read; convert it to PNG or JPEG first",
            format_name(format)
        )));
    }
    let mut reader = reader;
    let mut limits = image::Limits::default();
    limits.max_image_width = Some(32_768);
    limits.max_image_height = Some(32_768);
    // The decoded image and one copy (rotation, resizing, drawing) must fit the child's memory.
    limits.max_alloc = Some(memory_mb.saturating_mul(1024 * 1024) / 3);
    reader.limits(limits);
    let mut decoder = reader.into_decoder().map_err(failure)?;
    let (w, h) = decoder.dimensions();
    if u64::from(w) * u64::from(h) > MAX_PIXELS {
        return Err(ReadFailure::TooLarge(format!(
            "the image claims {w}×{h} px ({} megapixels), more than the {} megapixels the image \
             tools decode (a decompression bomb, or a scan too large: shrink it first)",
            u64::from(w) * u64::from(h) / 1_000_000,
            MAX_PIXELS / 1_000_000
        )));
    }
    let orientation = decoder
        .orientation()
        .unwrap_or(image::metadata::Orientation::NoTransforms);
    let mut image = DynamicImage::from_decoder(decoder).map_err(failure)?;
    let rotation = (orientation != image::metadata::Orientation::NoTransforms)
        .then(|| format!("{orientation:?}"));
    image.apply_orientation(orientation);
    Ok(Decoded {
        image,
        format,
        stored: (w, h),
        rotation,
    })
}

fn failure(e: ImageError) -> ReadFailure {
    match e {
        ImageError::Limits(l) => ReadFailure::TooLarge(format!(
            "decoding the image would pass the tools' limits ({l}); shrink it first"
        )),
        ImageError::Unsupported(u) => ReadFailure::WrongType(format!("{u}")),
        ImageError::Decoding(d) => ReadFailure::Corrupt(format!("{d}")),
        ImageError::IoError(io) => ReadFailure::Corrupt(format!("the image is truncated ({io})")),
        other => ReadFailure::Corrupt(other.to_string()),
    }
}

fn format_name(format: ImageFormat) -> String {
    format
        .extensions_str()
        .first()
        .map_or_else(|| format!("{format:?}"), |e| e.to_ascii_uppercase())
        .replace("JPG", "JPEG")
}

fn encode(image: &DynamicImage, format: ImageFormat) -> Result<Vec<u8>, ReadFailure> {
    let mut out = Cursor::new(Vec::new());
    let written = if format == ImageFormat::Jpeg {
        DynamicImage::ImageRgb8(image.to_rgb8()).write_to(&mut out, format)
    } else {
        image.write_to(&mut out, format)
    };
    written.map_err(|e| ReadFailure::TooLarge(format!("cannot encode the result: {e}")))?;
    Ok(out.into_inner())
}

/// The stroke width for an image: 2 px, and thicker on large images so it stays visible.
pub(crate) fn stroke(width: u32, height: u32) -> u32 {
    (width.max(height) / 400).max(2)
}

/// The label size in pixels for an image.
pub(crate) fn text_size(width: u32, height: u32) -> f32 {
    (width.max(height) as f32 / 40.0).clamp(12.0, 64.0)
}

fn color(name: Option<&str>) -> Result<Rgba<u8>, ReadFailure> {
    let name = name.unwrap_or("red").trim().to_ascii_lowercase();
    let rgb = match name.as_str() {
        "red" => [230, 25, 25],
        "green" => [20, 170, 40],
        "blue" => [30, 90, 230],
        "yellow" => [250, 210, 0],
        "orange" => [255, 140, 0],
        "purple" => [150, 40, 200],
        "white" => [255, 255, 255],
        "black" => [0, 0, 0],
        hex if hex.len() == 7 && hex.starts_with('#') => {
            let byte = |i: usize| u8::from_str_radix(&hex[i..i + 2], 16).ok();
            match (byte(1), byte(3), byte(5)) {
                (Some(r), Some(g), Some(b)) => [r, g, b],
                _ => return Err(bad_color(&name)),
            }
        }
        _ => return Err(bad_color(&name)),
    };
    Ok(Rgba([rgb[0], rgb[1], rgb[2], 255]))
}

fn bad_color(name: &str) -> ReadFailure {
    ReadFailure::NotFound(format!(
        "color {name:?} is not known; use red, green, blue, yellow, orange, purple, white, black \
         or #rrggbb"
    ))
}

fn draw(canvas: &mut RgbaImage, shapes: &[Shape]) -> Result<(), ReadFailure> {
    let font = FontRef::try_from_slice(FONT)
        .map_err(|e| ReadFailure::Corrupt(format!("the bundled font cannot be read: {e}")))?;
    let (w, h) = canvas.dimensions();
    let width = stroke(w, h);
    let size = text_size(w, h);
    for (i, shape) in shapes.iter().enumerate() {
        let paint = color(shape.color.as_deref())?;
        let c = &shape.coordinates;
        let wanted = if shape.kind == ShapeKind::Text { 2 } else { 4 };
        if c.len() != wanted || c.iter().any(|v| !v.is_finite()) {
            return Err(ReadFailure::NotFound(format!(
                "shapes[{i}] ({:?}) needs {wanted} coordinates ({}), got {:?}",
                shape.kind,
                if wanted == 2 {
                    "[x, y]"
                } else {
                    "[x1, y1, x2, y2]"
                },
                c
            )));
        }
        match shape.kind {
            ShapeKind::Box => {
                let (x1, y1, x2, y2) = (c[0], c[1], c[2], c[3]);
                for (a, b) in [
                    ((x1, y1), (x2, y1)),
                    ((x2, y1), (x2, y2)),
                    ((x2, y2), (x1, y2)),
                    ((x1, y2), (x1, y1)),
                ] {
                    line(canvas, a, b, width, paint);
                }
            }
            ShapeKind::Ellipse => {
                let (cx, cy) = ((c[0] + c[2]) / 2.0, (c[1] + c[3]) / 2.0);
                let (rx, ry) = (((c[2] - c[0]) / 2.0).abs(), ((c[3] - c[1]) / 2.0).abs());
                let steps = ((rx + ry) * 4.0).clamp(64.0, 20_000.0) as usize;
                for k in 0..steps {
                    let t = k as f64 / steps as f64 * std::f64::consts::TAU;
                    stamp(canvas, cx + rx * t.cos(), cy + ry * t.sin(), width, paint);
                }
            }
            ShapeKind::Arrow => {
                let (x1, y1, x2, y2) = (c[0], c[1], c[2], c[3]);
                line(canvas, (x1, y1), (x2, y2), width, paint);
                let angle = (y1 - y2).atan2(x1 - x2);
                let head = (f64::from(width) * 5.0).max(10.0);
                for turn in [-0.5f64, 0.5] {
                    let a = angle + turn;
                    line(
                        canvas,
                        (x2, y2),
                        (x2 + head * a.cos(), y2 + head * a.sin()),
                        width,
                        paint,
                    );
                }
            }
            ShapeKind::Text => {
                let text = shape.label.as_deref().unwrap_or_default();
                write(canvas, &font, size, (c[0], c[1]), text, paint);
            }
        }
        if shape.kind != ShapeKind::Text
            && let Some(label) = shape.label.as_deref()
        {
            let top = c[1].min(c[3]);
            let y = if top >= f64::from(size) * 1.3 {
                top - f64::from(size) * 1.3
            } else {
                c[1].max(c[3]) + f64::from(width)
            };
            write(canvas, &font, size, (c[0].min(c[2]), y), label, paint);
        }
    }
    Ok(())
}

/// A line `width` pixels wide from `a` to `b`.
fn line(canvas: &mut RgbaImage, a: (f64, f64), b: (f64, f64), width: u32, paint: Rgba<u8>) {
    let steps = (b.0 - a.0)
        .abs()
        .max((b.1 - a.1).abs())
        .ceil()
        .min(100_000.0) as usize;
    for k in 0..=steps {
        let t = if steps == 0 {
            0.0
        } else {
            k as f64 / steps as f64
        };
        stamp(
            canvas,
            a.0 + (b.0 - a.0) * t,
            a.1 + (b.1 - a.1) * t,
            width,
            paint,
        );
    }
}

/// A square of `width` pixels centred on (x, y), clipped to the canvas.
fn stamp(canvas: &mut RgbaImage, x: f64, y: f64, width: u32, paint: Rgba<u8>) {
    let half = f64::from(width) / 2.0;
    let (w, h) = canvas.dimensions();
    let x0 = (x - half).round().max(0.0) as i64;
    let y0 = (y - half).round().max(0.0) as i64;
    let x1 = ((x + half).round() as i64).min(i64::from(w));
    let y1 = ((y + half).round() as i64).min(i64::from(h));
    for py in y0..y1 {
        for px in x0..x1 {
            canvas.put_pixel(px as u32, py as u32, paint);
        }
    }
}

/// `text` in the bundled font with its top left corner at `at`, blended by coverage.
fn write(
    canvas: &mut RgbaImage,
    font: &FontRef<'_>,
    size: f32,
    at: (f64, f64),
    text: &str,
    paint: Rgba<u8>,
) {
    let scaled = font.as_scaled(PxScale::from(size));
    let mut caret = ab_glyph::point(at.0 as f32, at.1 as f32 + scaled.ascent());
    let mut previous = None;
    let (w, h) = canvas.dimensions();
    for ch in text.chars().filter(|c| !c.is_control()) {
        let id = scaled.glyph_id(ch);
        if let Some(prev) = previous {
            caret.x += scaled.kern(prev, id);
        }
        let glyph = id.with_scale_and_position(PxScale::from(size), caret);
        caret.x += scaled.h_advance(id);
        previous = Some(id);
        let Some(outlined) = font.outline_glyph(glyph) else {
            continue;
        };
        let bounds = outlined.px_bounds();
        outlined.draw(|gx, gy, coverage| {
            let x = bounds.min.x as i64 + i64::from(gx);
            let y = bounds.min.y as i64 + i64::from(gy);
            if coverage <= 0.0 || x < 0 || y < 0 || x >= i64::from(w) || y >= i64::from(h) {
                return;
            }
            let pixel = canvas.get_pixel_mut(x as u32, y as u32);
            for c in 0..3 {
                let blended =
                    f32::from(pixel[c]) * (1.0 - coverage) + f32::from(paint[c]) * coverage;
                pixel[c] = blended.round() as u8;
            }
            pixel[3] = 255;
        });
    }
}
