//! `scripts/dist.sh` and `scripts/code-order.sh`, run for real by bash in a copy of the
//! checkout's layout, with stand-ins for the slow parts (cargo's fat-LTO builds, valgrind, the
//! footprint bench's model server) on PATH. What is checked is the scripts' own logic: where the
//! list goes, what the second link is told, and that the checkout is left as it was.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use pretty_assertions::assert_eq;

const COMMITTED: &str = "_ZN7maestro9committed\n";

/// Records each call (its arguments and the layout variables) and fakes what the scripts read:
/// the dist binary, its link map when asked for one, and the bench executable's path.
const CARGO: &str = r#"#!/usr/bin/env bash
echo "cargo $* MAESTRO_CODE_ORDER=${MAESTRO_CODE_ORDER-} MAESTRO_DATA_ORDER=${MAESTRO_DATA_ORDER-} MAESTRO_LINK_MAP=${MAESTRO_LINK_MAP-}" >>"$FAKE_LOG"
case " $* " in
  *" bench "*) echo "  Executable benches/footprint.rs ($FAKE_BIN/footprint)" ;;
  *" build "*) mkdir -p target/dist && echo "a maestro binary" >target/dist/maestro
    if [ -n "${MAESTRO_LINK_MAP-}" ]; then echo "a link map" >"$MAESTRO_LINK_MAP"; fi ;;
esac
"#;

/// The footprint bench: with `FOOTPRINT_DATA_ORDER`, reads the trace on stdin against the link map
/// it is given and names one section; else its serving mode, which prints the URL and the
/// directory with the run's files.
const FOOTPRINT: &str = r#"#!/usr/bin/env bash
if [ -n "${FOOTPRINT_DATA_ORDER-}" ]; then
  grep -q 'a link map' "$1" || exit 1
  grep -q ' L 00113000,8' || exit 1
  echo ".rodata.hot"
  exit 0
fi
dir=$(mktemp -d)
echo "piece" >"$dir/piece.yaml"
echo "notes" >"$dir/notes.md"
echo "http://127.0.0.1:9/v1 $dir"
exec sleep 60
"#;

/// Writes a callgrind profile in which the binary (the first argument that is not an option)
/// ran two functions; under lackey, a memory trace to the log descriptor and the run's own
/// last line to stderr.
const VALGRIND: &str = r#"#!/usr/bin/env bash
for arg in "$@"; do
  case $arg in
    --callgrind-out-file=*) out=${arg#*=} ;;
    --tool=lackey) lackey=1 ;;
    --*) ;;
    *) bin=$arg; break ;;
  esac
done
if [ -n "${lackey-}" ]; then
  printf 'I  00200000,3\n L 00113000,8\n' >&9
  echo "run 1 completed" >&2
  exit 0
fi
printf 'ob=(1) %s\nfn=(1) _ZN7maestro3run\nfn=(2) _ZN7maestro4main\nfn=(2)\n' "$bin" >"$out"
"#;

struct Checkout {
    dir: tempfile::TempDir,
}

impl Checkout {
    fn new() -> Checkout {
        let dir = tempfile::tempdir().unwrap();
        let scripts = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts");
        std::fs::create_dir_all(dir.path().join("repo/scripts")).unwrap();
        for script in ["dist.sh", "code-order.sh"] {
            std::fs::copy(
                scripts.join(script),
                dir.path().join("repo/scripts").join(script),
            )
            .unwrap();
        }
        std::fs::create_dir_all(dir.path().join("repo/crates/maestro-cli")).unwrap();
        std::fs::write(
            dir.path().join("repo/crates/maestro-cli/code-order.txt"),
            COMMITTED,
        )
        .unwrap();
        std::fs::create_dir_all(dir.path().join("bin")).unwrap();
        for (name, text) in [
            ("cargo", CARGO),
            ("footprint", FOOTPRINT),
            ("valgrind", VALGRIND),
        ] {
            let path = dir.path().join("bin").join(name);
            std::fs::write(&path, text).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        Checkout { dir }
    }

    fn repo(&self) -> PathBuf {
        self.dir.path().join("repo")
    }

    fn dist(&self, args: &[&str]) -> Output {
        let bin = self.dir.path().join("bin");
        let path = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        Command::new("bash")
            .arg(self.repo().join("scripts/dist.sh"))
            .args(args)
            .current_dir(self.dir.path())
            .env("PATH", path)
            .env("FAKE_BIN", &bin)
            .env("FAKE_LOG", self.dir.path().join("cargo.log"))
            .env_remove("CARGO_TARGET_DIR")
            .env_remove("MAESTRO_CODE_ORDER")
            .env_remove("MAESTRO_DATA_ORDER")
            .env_remove("MAESTRO_LINK_MAP")
            .output()
            .unwrap()
    }

    fn read(&self, path: &str) -> String {
        std::fs::read_to_string(self.repo().join(path)).unwrap()
    }

    fn cargo_calls(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join("cargo.log"))
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect()
    }
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn dist_keeps_the_list_under_target_and_leaves_the_checkout_clean() {
    let checkout = Checkout::new();
    let out = checkout.dist(&[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        checkout.read("crates/maestro-cli/code-order.txt"),
        COMMITTED
    );
    assert_eq!(
        checkout.read("target/code-order.txt"),
        "_ZN7maestro3run\n_ZN7maestro4main\n"
    );
    assert_eq!(checkout.read("target/data-order.txt"), ".rodata.hot\n");
    assert!(
        !checkout
            .repo()
            .join("crates/maestro-cli/data-order.txt")
            .exists()
    );
    let order = checkout.repo().join("target/code-order.txt");
    let data = checkout.repo().join("target/data-order.txt");
    let map = checkout.repo().join("target/dist/maestro.map");
    assert_eq!(
        checkout.cargo_calls(),
        [
            format!(
                "cargo build --locked --profile dist -p maestro-cli MAESTRO_CODE_ORDER= \
                 MAESTRO_DATA_ORDER= MAESTRO_LINK_MAP={}",
                map.display()
            ),
            "cargo bench --profile dev -p maestro-cli --bench footprint --no-run \
             MAESTRO_CODE_ORDER= MAESTRO_DATA_ORDER= MAESTRO_LINK_MAP="
                .to_string(),
            format!(
                "cargo build --locked --profile dist -p maestro-cli MAESTRO_CODE_ORDER={} \
                 MAESTRO_DATA_ORDER={} MAESTRO_LINK_MAP=",
                order.display(),
                data.display()
            ),
        ]
    );
    // The map of the first pass is not left behind.
    assert!(!map.exists());
    assert!(checkout.repo().join("target/dist/maestro").is_file());
    assert!(
        !checkout
            .repo()
            .join("target/dist/maestro.unordered")
            .exists()
    );
}

#[test]
fn dist_updates_the_committed_list_only_when_asked() {
    let checkout = Checkout::new();
    let out = checkout.dist(&["--update-code-order"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        checkout.read("crates/maestro-cli/code-order.txt"),
        "_ZN7maestro3run\n_ZN7maestro4main\n"
    );
    assert_eq!(
        checkout.read("crates/maestro-cli/data-order.txt"),
        ".rodata.hot\n"
    );

    let checkout = Checkout::new();
    let out = checkout.dist(&["--update-code-ordr"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        "error: unknown argument `--update-code-ordr`; the only one is --update-code-order\n"
    );
    assert_eq!(
        checkout.read("crates/maestro-cli/code-order.txt"),
        COMMITTED
    );
}
