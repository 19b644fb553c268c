//! The daemonless test images of `tests/images/build.sh` (umoci OCI layouts, imported into a real
//! node's containerd by `tests/images/import.sh`) are the images the Dockerfiles describe: the
//! operator's and the webhook's image configs (index.json → manifest → config blob, digests
//! verified) have the final stage's ENTRYPOINT, USER and EXPOSE ports of `operator/Dockerfile` and
//! `webhook/Dockerfile`, the entrypoint binary is in the image's layers, and `images.json` (what
//! the real-node tests read) says the same as the config blobs.
//!
//! Uses `$NODEWRIGHT_IMAGES_DIR` when set, else runs `tests/images/build.sh` (which needs umoci,
//! busybox-static, binutils and jq: `apt-get install umoci busybox-static binutils jq`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value;

fn repo_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The images directory: `$NODEWRIGHT_IMAGES_DIR`, or what build.sh prints as its last line.
fn images_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        if let Some(dir) = std::env::var_os("NODEWRIGHT_IMAGES_DIR") {
            return PathBuf::from(dir);
        }
        let script = repo_dir().join("tests/images/build.sh");
        let out = Command::new("bash")
            .arg(&script)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "{} failed ({}); it needs umoci, busybox-static, binutils and jq \
             (apt-get install umoci busybox-static binutils jq). stderr:\n{stderr}",
            script.display(),
            out.status
        );
        let last = stdout.lines().last().unwrap_or_default();
        let dir = last
            .strip_prefix("export NODEWRIGHT_IMAGES_DIR=")
            .unwrap_or_else(|| {
                panic!("build.sh's last stdout line must be `export NODEWRIGHT_IMAGES_DIR=<dir>`, got {last:?}")
            });
        PathBuf::from(dir)
    })
}

/// The final stage of a Dockerfile: the instructions after the last FROM, continuation lines
/// joined, comments dropped, as (INSTRUCTION, arguments).
fn final_stage(dockerfile: &str) -> Vec<(String, String)> {
    let mut instructions = Vec::new();
    let mut current = String::new();
    for line in dockerfile.lines() {
        let trimmed = line.trim();
        if current.is_empty() && (trimmed.is_empty() || trimmed.starts_with('#')) {
            continue;
        }
        if let Some(head) = trimmed.strip_suffix('\\') {
            current.push_str(head);
            current.push(' ');
            continue;
        }
        current.push_str(trimmed);
        let (op, args) = current
            .split_once(char::is_whitespace)
            .unwrap_or((current.as_str(), ""));
        instructions.push((op.to_ascii_uppercase(), args.trim().to_string()));
        current.clear();
    }
    let last_from = instructions
        .iter()
        .rposition(|(op, _)| op == "FROM")
        .expect("a Dockerfile has a FROM");
    instructions.split_off(last_from + 1)
}

/// What an image's config must say, as the Dockerfile's final stage declares it.
#[derive(Debug, PartialEq, Eq)]
struct Declared {
    entrypoint: Vec<String>,
    user: String,
    ports: BTreeSet<String>,
}

fn declared(dockerfile: &str) -> Declared {
    let stage = final_stage(dockerfile);
    let last = |op: &str| {
        stage
            .iter()
            .rev()
            .find(|(o, _)| o == op)
            .map(|(_, a)| a.clone())
    };
    let entrypoint = last("ENTRYPOINT").expect("the final stage has an ENTRYPOINT");
    let entrypoint: Vec<String> = if entrypoint.starts_with('[') {
        serde_json::from_str(&entrypoint).expect("ENTRYPOINT's exec form is a JSON array")
    } else {
        vec!["/bin/sh".into(), "-c".into(), entrypoint]
    };
    let ports = stage
        .iter()
        .filter(|(op, _)| op == "EXPOSE")
        .flat_map(|(_, a)| a.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        .map(|p| {
            if p.contains('/') {
                p
            } else {
                format!("{p}/tcp")
            }
        })
        .collect();
    Declared {
        entrypoint,
        user: last("USER").unwrap_or_default(),
        ports,
    }
}

/// An image tar unpacked into a temporary OCI layout.
struct Layout {
    dir: tempfile::TempDir,
}

impl Layout {
    fn open(tar: &Path) -> Layout {
        let dir = tempfile::tempdir().expect("tempdir");
        let st = Command::new("tar")
            .arg("-xf")
            .arg(tar)
            .arg("-C")
            .arg(dir.path())
            .status()
            .expect("run tar");
        assert!(st.success(), "cannot unpack {}", tar.display());
        let layout: Value = self::read_json(&dir.path().join("oci-layout"));
        assert_eq!(
            layout["imageLayoutVersion"],
            "1.0.0",
            "{} is not an OCI image layout",
            tar.display()
        );
        Layout { dir }
    }

    fn blob_path(&self, digest: &str) -> PathBuf {
        let hex = digest
            .strip_prefix("sha256:")
            .unwrap_or_else(|| panic!("unexpected digest {digest}"));
        let path = self.dir.path().join("blobs/sha256").join(hex);
        // The blob is what its digest says.
        let out = Command::new("sha256sum")
            .arg(&path)
            .output()
            .expect("run sha256sum");
        let sum = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            sum.split_whitespace().next(),
            Some(hex),
            "blob {digest} does not match its digest"
        );
        path
    }

    fn blob_json(&self, digest: &str) -> Value {
        read_json(&self.blob_path(digest))
    }

    /// (tag, manifest) for each manifest in index.json.
    fn manifests(&self) -> Vec<(String, Value)> {
        let index = read_json(&self.dir.path().join("index.json"));
        index["manifests"]
            .as_array()
            .expect("index.json has manifests")
            .iter()
            .map(|m| {
                let tag = m["annotations"]["org.opencontainers.image.ref.name"]
                    .as_str()
                    .expect("every manifest is tagged (org.opencontainers.image.ref.name)")
                    .to_string();
                let digest = m["digest"].as_str().expect("manifest digest");
                (tag, self.blob_json(digest))
            })
            .collect()
    }

    /// Every path in the image's layers (without a leading `./` or `/`).
    fn files(&self, manifest: &Value) -> BTreeSet<String> {
        let mut files = BTreeSet::new();
        for layer in manifest["layers"].as_array().expect("layers") {
            let path = self.blob_path(layer["digest"].as_str().expect("layer digest"));
            let gz = layer["mediaType"].as_str().unwrap_or("").ends_with("gzip");
            let out = Command::new("tar")
                .arg(if gz { "-tzf" } else { "-tf" })
                .arg(&path)
                .output()
                .expect("run tar");
            assert!(out.status.success(), "cannot list layer {}", path.display());
            files.extend(String::from_utf8_lossy(&out.stdout).lines().map(|l| {
                l.trim_start_matches("./")
                    .trim_start_matches('/')
                    .to_string()
            }));
        }
        files
    }
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn images_json() -> Vec<Value> {
    read_json(&images_dir().join("images.json"))
        .as_array()
        .expect("images.json is an array")
        .clone()
}

fn image_entry(name: &str) -> Value {
    images_json()
        .into_iter()
        .find(|i| i["name"] == name)
        .unwrap_or_else(|| panic!("images.json has no {name}"))
}

fn config_of(entry: &Value) -> (Layout, Value, Value) {
    let tar = images_dir().join(entry["tar"].as_str().expect("tar"));
    let layout = Layout::open(&tar);
    let mut manifests = layout.manifests();
    assert_eq!(manifests.len(), 1, "{}: one manifest", tar.display());
    let (tag, manifest) = manifests.remove(0);
    assert_eq!(tag, "dev");
    let config = layout.blob_json(
        manifest["config"]["digest"]
            .as_str()
            .expect("config digest"),
    );
    (layout, manifest, config)
}

fn ports_of(config: &Value) -> BTreeSet<String> {
    config["config"]["ExposedPorts"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|s| s.as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}

fn check_service_image(name: &str, dockerfile: &str) {
    let text = std::fs::read_to_string(repo_dir().join(dockerfile))
        .unwrap_or_else(|e| panic!("{dockerfile}: {e}"));
    let want = declared(&text);
    let entry = image_entry(name);
    let (layout, manifest, config) = config_of(&entry);
    let got = Declared {
        entrypoint: strings(&config["config"]["Entrypoint"]),
        user: config["config"]["User"].as_str().unwrap_or("").to_string(),
        ports: ports_of(&config),
    };
    assert_eq!(
        got, want,
        "{name}'s image config disagrees with {dockerfile}'s final stage"
    );
    assert_eq!(config["os"], "linux");
    assert_eq!(config["architecture"], "amd64");
    assert!(
        !matches!(got.user.as_str(), "" | "0" | "root" | "0:0"),
        "{name} must not run as root"
    );
    let files = layout.files(&manifest);
    let binary = want.entrypoint[0].trim_start_matches('/');
    assert!(files.contains(binary), "{name}: no {binary} in its layers");
    assert!(
        files.iter().any(|f| f.contains("ld-linux")),
        "{name}: the dynamic loader is missing from its layers"
    );
    assert!(files.contains("etc/passwd"), "{name}: no /etc/passwd");
    assert!(
        !files.contains("bin/sh"),
        "{name}: a distroless-like image has no shell"
    );
    // images.json (read by the real-node tests) agrees with the config blob.
    assert_eq!(strings(&entry["entrypoint"]), got.entrypoint);
    assert_eq!(entry["user"].as_str(), Some(got.user.as_str()));
    assert_eq!(
        strings(&entry["exposed_ports"])
            .into_iter()
            .collect::<BTreeSet<_>>(),
        got.ports
    );
}

#[test]
fn operator_image_matches_its_dockerfile() {
    check_service_image("nodewright.test/nodewright-operator", "operator/Dockerfile");
}

#[test]
fn webhook_image_matches_its_dockerfile() {
    check_service_image("nodewright.test/nodewright-webhook", "webhook/Dockerfile");
}

#[test]
fn shellscript_tags_carry_their_own_package_version() {
    let entry = image_entry("nodewright.test/shellscript");
    let tar = images_dir().join(entry["tar"].as_str().expect("tar"));
    let layout = Layout::open(&tar);
    let tags: Vec<String> = layout.manifests().into_iter().map(|(t, _)| t).collect();
    assert_eq!(tags, ["1.0.0", "1.1.0", "2.0.0"]);
    for (tag, manifest) in layout.manifests() {
        let files = layout.files(&manifest);
        for needed in [
            "bin/sh",
            "bin/mkdir",
            "bin/cp",
            "skyhook-package/config.json",
            "skyhook-package/skyhook_dir/shellscript_run.sh",
        ] {
            assert!(files.contains(needed), "shellscript:{tag} lacks {needed}");
        }
        // The config.json of this tag (the last layer that has it).
        let mut version = None;
        for layer in manifest["layers"].as_array().expect("layers") {
            let path = layout.blob_path(layer["digest"].as_str().expect("digest"));
            let out = Command::new("tar")
                .args(["-xzOf"])
                .arg(&path)
                .arg("skyhook-package/config.json")
                .output()
                .expect("run tar");
            if out.status.success() && !out.stdout.is_empty() {
                let config: Value = serde_json::from_slice(&out.stdout).expect("config.json");
                version = config["package_version"].as_str().map(str::to_string);
            }
        }
        assert_eq!(version.as_deref(), Some(tag.as_str()), "shellscript:{tag}");
    }
}

#[test]
fn dockerfile_final_stage_parser() {
    let text = "# syntax=docker/dockerfile:1.7\nFROM rust AS build\nUSER 0\nEXPOSE 1\n\
                ENTRYPOINT [\"/wrong\"]\nRUN a \\\n && b\n# comment\nFROM base:nonroot\n\
                COPY --from=build /x /usr/local/bin/x\nUSER 65532:65532\nexpose 8080 8081/udp\n\
                EXPOSE 9090\nENTRYPOINT [\"/usr/local/bin/x\", \"--flag\"]\n";
    assert_eq!(
        declared(text),
        Declared {
            entrypoint: vec!["/usr/local/bin/x".into(), "--flag".into()],
            user: "65532:65532".into(),
            ports: ["8080/tcp", "8081/udp", "9090/tcp"]
                .into_iter()
                .map(String::from)
                .collect(),
        }
    );
    assert_eq!(
        declared("FROM a\nENTRYPOINT exec x\n").entrypoint,
        ["/bin/sh", "-c", "exec x"]
    );
}
