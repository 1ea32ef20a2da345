//! `InstallSkill` through the registry, with real folders and archives written by the `zip`
//! and `tar` crates: a good skill is installed and `ListSkills` shows it; zip-slip, links that
//! lead out, a missing or invalid `SKILL.md` and oversize skills are refused with nothing
//! installed; without `tools.skills_install_dir` the tool does not exist.

use crate::support;

use std::io::Write;
use std::path::{Path, PathBuf};

use maestro_tools::{BashSandboxMode, ToolsConfig};
use serde_json::json;
use support::Bench;

const SKILL_MD: &str = "---\nname: csv-cleaner\ndescription: Cleans CSV files before analysis\n---\n# CSV cleaner\nUse clean.py.\n";

fn bench() -> (Bench, PathBuf) {
    let config = ToolsConfig {
        bash_sandbox: BashSandboxMode::Off,
        ..ToolsConfig::default()
    };
    // The install directory lives beside the workspace, outside it.
    let b = Bench::with_config(config.clone());
    let install = b
        .root()
        .join("../installed-skills-".to_string() + &uuid_like(b.root()));
    let b = Bench::with_config(ToolsConfig {
        skills_install_dir: Some(install.clone()),
        ..config
    })
    .editing();
    (b, install)
}

fn uuid_like(p: &Path) -> String {
    p.file_name().unwrap().to_string_lossy().into_owned()
}

fn installed(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

fn zip_of(path: &Path, files: &[(&str, &[u8])]) {
    let mut zip = zip::ZipWriter::new(std::fs::File::create(path).unwrap());
    for (name, content) in files {
        zip.start_file(*name, zip::write::SimpleFileOptions::default())
            .unwrap();
        zip.write_all(content).unwrap();
    }
    zip.finish().unwrap();
}

#[tokio::test]
async fn a_good_skill_is_installed_and_listed_from_a_folder_and_from_a_tar_gz() {
    let (b, install) = bench();
    b.write("input/csv-cleaner/SKILL.md", SKILL_MD);
    b.write("input/csv-cleaner/scripts/clean.py", "print('clean')\n");
    let out = b
        .call("InstallSkill", json!({"source": "input/csv-cleaner"}))
        .await;
    assert!(out.ok, "{}", out.output);
    assert!(
        out.output
            .starts_with("installed skill `csv-cleaner` from input/csv-cleaner (2 files, "),
        "{}",
        out.output
    );
    assert_eq!(installed(&install), ["csv-cleaner"]);
    assert_eq!(
        std::fs::read_to_string(install.join("csv-cleaner/scripts/clean.py")).unwrap(),
        "print('clean')\n"
    );
    let listed = b.call("ListSkills", json!({})).await;
    assert_eq!(
        listed.output,
        "csv-cleaner: Cleans CSV files before analysis\n"
    );
    let read = b.call("ReadSkill", json!({"name": "csv-cleaner"})).await;
    assert!(
        read.ok && read.output.contains("Use clean.py."),
        "{}",
        read.output
    );
    // The same name again is refused, and the installed one is untouched.
    let again = b
        .call("InstallSkill", json!({"source": "input/csv-cleaner"}))
        .await;
    assert!(!again.ok);
    assert!(
        again.output.contains("already available"),
        "{}",
        again.output
    );

    // A .tar.gz whose one top folder is the skill.
    let tgz = b.path("input/pdf-helper.tar.gz");
    let gz = flate2::write::GzEncoder::new(
        std::fs::File::create(&tgz).unwrap(),
        flate2::Compression::default(),
    );
    let mut tar = tar::Builder::new(gz);
    let md = "---\nname: pdf-helper\ndescription: \"Reads PDFs\"\n---\nSteps.\n";
    for (name, content) in [("pdf-helper/SKILL.md", md), ("pdf-helper/notes.txt", "n\n")] {
        let mut header = tar::Header::new_gnu();
        header.set_size(content.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        tar.append_data(&mut header, name, content.as_bytes())
            .unwrap();
    }
    tar.into_inner().unwrap().finish().unwrap();
    let out = b
        .call("InstallSkill", json!({"source": "input/pdf-helper.tar.gz"}))
        .await;
    assert!(out.ok, "{}", out.output);
    assert_eq!(installed(&install), ["csv-cleaner", "pdf-helper"]);
    let listed = b.call("ListSkills", json!({})).await;
    assert_eq!(
        listed.output,
        "csv-cleaner: Cleans CSV files before analysis\npdf-helper: Reads PDFs\n"
    );
    std::fs::remove_dir_all(&install).unwrap();
}

#[tokio::test]
async fn bad_skills_are_refused_and_nothing_is_installed() {
    let (b, install) = bench();
    let parent = install.parent().unwrap().to_path_buf();
    let refused = |out: maestro_tools::ToolOutput, needle: &str| {
        assert!(!out.ok, "{}", out.output);
        assert!(out.output.contains(needle), "{needle}: {}", out.output);
    };

    // zip-slip: an entry that climbs out of the skill.
    zip_of(
        &b.path("input/slip.zip"),
        &[
            ("SKILL.md", SKILL_MD.as_bytes()),
            ("../../evil.txt", b"owned\n"),
        ],
    );
    refused(
        b.call("InstallSkill", json!({"source": "input/slip.zip"}))
            .await,
        "points outside the skill",
    );
    assert!(!parent.join("evil.txt").exists());

    // A link inside a folder skill, pointing out of it.
    b.write("input/linky/SKILL.md", SKILL_MD);
    std::os::unix::fs::symlink("/etc/passwd", b.path("input/linky/passwd")).unwrap();
    refused(
        b.call("InstallSkill", json!({"source": "input/linky"}))
            .await,
        "`passwd` is a link",
    );

    // A link inside a tar.gz.
    let tgz = b.path("input/link.tgz");
    let gz = flate2::write::GzEncoder::new(
        std::fs::File::create(&tgz).unwrap(),
        flate2::Compression::default(),
    );
    let mut tar = tar::Builder::new(gz);
    let mut header = tar::Header::new_gnu();
    header.set_size(SKILL_MD.len() as u64);
    header.set_mode(0o644);
    header.set_cksum();
    tar.append_data(&mut header, "SKILL.md", SKILL_MD.as_bytes())
        .unwrap();
    let mut link = tar::Header::new_gnu();
    link.set_entry_type(tar::EntryType::Symlink);
    link.set_size(0);
    tar.append_link(&mut link, "shadow", "/etc/shadow").unwrap();
    tar.into_inner().unwrap().finish().unwrap();
    refused(
        b.call("InstallSkill", json!({"source": "input/link.tgz"}))
            .await,
        "`shadow` is a link",
    );

    // No SKILL.md; SKILL.md without front matter; without a description; a bad name.
    zip_of(&b.path("input/none.zip"), &[("README.md", b"# hi\n")]);
    refused(
        b.call("InstallSkill", json!({"source": "input/none.zip"}))
            .await,
        "has no SKILL.md",
    );
    zip_of(
        &b.path("input/plain.zip"),
        &[("SKILL.md", b"# just text\n")],
    );
    refused(
        b.call("InstallSkill", json!({"source": "input/plain.zip"}))
            .await,
        "SKILL.md has no front matter",
    );
    zip_of(
        &b.path("input/nodesc.zip"),
        &[("SKILL.md", b"---\nname: x\n---\nbody\n")],
    );
    refused(
        b.call("InstallSkill", json!({"source": "input/nodesc.zip"}))
            .await,
        "has no `description:`",
    );
    zip_of(
        &b.path("input/badname.zip"),
        &[("SKILL.md", b"---\nname: ../up\ndescription: d\n---\n")],
    );
    refused(
        b.call("InstallSkill", json!({"source": "input/badname.zip"}))
            .await,
        "names the skill `../up`",
    );

    // Oversize: too many files, and a small archive that inflates past the byte limit.
    let many: Vec<(String, Vec<u8>)> = (0..=200)
        .map(|i| (format!("f{i}.txt"), b"x".to_vec()))
        .collect();
    let mut files: Vec<(&str, &[u8])> = vec![("SKILL.md", SKILL_MD.as_bytes())];
    files.extend(many.iter().map(|(n, c)| (n.as_str(), c.as_slice())));
    zip_of(&b.path("input/many.zip"), &files);
    refused(
        b.call("InstallSkill", json!({"source": "input/many.zip"}))
            .await,
        "more than 200 files",
    );
    let zeros = vec![0u8; 21 * 1024 * 1024];
    zip_of(
        &b.path("input/bomb.zip"),
        &[("SKILL.md", SKILL_MD.as_bytes()), ("zeros.bin", &zeros)],
    );
    assert!(std::fs::metadata(b.path("input/bomb.zip")).unwrap().len() < 1024 * 1024);
    refused(
        b.call("InstallSkill", json!({"source": "input/bomb.zip"}))
            .await,
        "more than 20971520 bytes",
    );

    // Not a folder or an archive.
    b.write("input/skill.txt", "hello\n");
    refused(
        b.call("InstallSkill", json!({"source": "input/skill.txt"}))
            .await,
        "is not a folder, a .zip",
    );

    // Nothing was installed, and no staging folder is left behind.
    assert_eq!(installed(&install), Vec::<String>::new());
    let _ = std::fs::remove_dir_all(&install);
}

#[tokio::test]
async fn installing_is_off_without_the_install_dir_and_needs_edit() {
    let b = Bench::new(BashSandboxMode::Off).editing();
    b.write("input/csv-cleaner/SKILL.md", SKILL_MD);
    let out = b
        .call("InstallSkill", json!({"source": "input/csv-cleaner"}))
        .await;
    assert!(!out.ok);
    assert!(out.output.contains("InstallSkill"), "{}", out.output);
    let catalog = maestro_tools::catalog::tool_catalog(&ToolsConfig::default(), false);
    match catalog.get("InstallSkill") {
        Some(maestro_tools::catalog::Availability::Unavailable(why)) => {
            assert!(why.contains("tools.skills_install_dir"), "{why}")
        }
        other => panic!("{other:?}"),
    }

    let (b, install) = bench();
    let mut reading = b;
    reading.ctx.edit = false;
    reading.write("input/csv-cleaner/SKILL.md", SKILL_MD);
    let out = reading
        .call("InstallSkill", json!({"source": "input/csv-cleaner"}))
        .await;
    assert!(!out.ok);
    assert!(out.output.contains("cannot edit files"), "{}", out.output);
    assert_eq!(installed(&install), Vec::<String>::new());
}
