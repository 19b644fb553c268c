//! The images the Dockerfiles describe are the images that are built.
//!
//! - The release images of `release/build.sh` (`$NODEWRIGHT_RELEASE_DIR`: an OCI layout per
//!   service holding one image index, one manifest per platform): every platform's config has the
//!   final stage's ENTRYPOINT, USER, WORKDIR, ENV, EXPOSE ports and LABEL keys of
//!   `operator/Dockerfile` and `webhook/Dockerfile`, and its layer holds exactly the files the
//!   stage's COPY instructions put there (the static binary, CA certificates, `release/rootfs`).
//!   `tests/run-all.sh` builds them (`release/build.sh --images-only --arch amd64`); without
//!   `NODEWRIGHT_RELEASE_DIR` these tests fail unless `NODEWRIGHT_ALLOW_SKIP` names
//!   `release_images`.
//! - The daemonless test images of `tests/images/build.sh` (umoci OCI layouts, imported into a real
//!   node's containerd by `tests/images/import.sh`): the shellscript package's tags carry their own
//!   version. Uses `$NODEWRIGHT_IMAGES_DIR` when set, else runs `tests/images/build.sh` (which
//!   needs umoci, busybox-static, binutils and jq: `apt-get install umoci busybox-static binutils
//!   jq`).

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

/// What an image's config and layer must say, as the Dockerfile's final stage declares it.
#[derive(Debug, PartialEq, Eq)]
struct Declared {
    entrypoint: Vec<String>,
    user: String,
    workdir: String,
    env: BTreeSet<String>,
    ports: BTreeSet<String>,
    label_keys: BTreeSet<String>,
    /// Regular files the COPY instructions put into the image (no leading `/`); a COPY of a
    /// directory of the repository (`release/rootfs/`) stands for every file under it.
    files: BTreeSet<String>,
}

/// Every file under `dir` (a directory of the repository), relative to it.
fn files_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if let Ok(rel) = path.strip_prefix(dir) {
                out.push(rel.to_string_lossy().into_owned());
            }
        }
    }
    out
}

fn declared(dockerfile: &str, context: &Path) -> Declared {
    let stage = final_stage(dockerfile);
    let last = |op: &str| {
        stage
            .iter()
            .rev()
            .find(|(o, _)| o == op)
            .map(|(_, a)| a.clone())
    };
    let all = |op: &str| -> Vec<String> {
        stage
            .iter()
            .filter(|(o, _)| o == op)
            .map(|(_, a)| a.clone())
            .collect()
    };
    let entrypoint = last("ENTRYPOINT").expect("the final stage has an ENTRYPOINT");
    let entrypoint: Vec<String> = if entrypoint.starts_with('[') {
        serde_json::from_str(&entrypoint).expect("ENTRYPOINT's exec form is a JSON array")
    } else {
        vec!["/bin/sh".into(), "-c".into(), entrypoint]
    };
    let ports = all("EXPOSE")
        .iter()
        .flat_map(|a| a.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        .map(|p| {
            if p.contains('/') {
                p
            } else {
                format!("{p}/tcp")
            }
        })
        .collect();
    // `ENV K=V ...` (values without spaces, as these Dockerfiles write them).
    let env = all("ENV")
        .iter()
        .flat_map(|a| a.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        .collect();
    // `LABEL k="v" \ k2="v 2"`: the keys are what precedes each `=` at the start of a word.
    let label_keys = all("LABEL")
        .iter()
        .flat_map(|a| {
            let mut keys = Vec::new();
            let mut quoted = false;
            let mut word_start = true;
            let mut key = String::new();
            for c in a.chars() {
                match c {
                    '"' => quoted = !quoted,
                    c if c.is_whitespace() && !quoted => {
                        word_start = true;
                        key.clear();
                    }
                    '=' if !quoted && word_start => {
                        keys.push(std::mem::take(&mut key));
                        word_start = false;
                    }
                    c if word_start => key.push(c),
                    _ => {}
                }
            }
            keys
        })
        .collect();
    let mut files = BTreeSet::new();
    for copy in all("COPY") {
        let words: Vec<&str> = copy.split_whitespace().collect();
        let from_stage = words.iter().any(|w| w.starts_with("--from="));
        let paths: Vec<&str> = words
            .iter()
            .copied()
            .filter(|w| !w.starts_with("--"))
            .collect();
        let Some((dest, sources)) = paths.split_last() else {
            panic!("COPY without a destination: {copy}");
        };
        for src in sources {
            let local = context.join(src);
            if !from_stage && local.is_dir() {
                for f in files_under(&local) {
                    files.insert(format!("{}/{f}", dest.trim_end_matches('/')));
                }
            } else if dest.ends_with('/') {
                let base = Path::new(src).file_name().expect("a file name");
                files.insert(format!("{dest}{}", base.to_string_lossy()));
            } else {
                files.insert((*dest).to_string());
            }
        }
    }
    Declared {
        entrypoint,
        user: last("USER").unwrap_or_default(),
        workdir: last("WORKDIR").unwrap_or_else(|| "/".into()),
        env,
        ports,
        label_keys,
        files: files
            .into_iter()
            .map(|f| f.trim_start_matches('/').to_string())
            .collect(),
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

/// The release directory (`release/build.sh`'s dist), or None when the run skips these tests.
fn release_dir() -> Option<PathBuf> {
    match std::env::var_os("NODEWRIGHT_RELEASE_DIR") {
        Some(dir) => Some(PathBuf::from(dir)),
        None => {
            // Panics unless skipping release_images was asked for.
            nodewright_e2e::skip::skip(
                "release_images",
                "NODEWRIGHT_RELEASE_DIR is not set (tests/run-all.sh builds the release images with \
                 release/build.sh --images-only --arch amd64 and sets it)",
            );
            None
        }
    }
}

fn check_service_image(name: &str, dockerfile: &str) {
    let Some(dist) = release_dir() else { return };
    let release = read_json(&dist.join("release.json"));
    let version = release["version"].as_str().expect("release.json version");
    let text = std::fs::read_to_string(repo_dir().join(dockerfile))
        .unwrap_or_else(|e| panic!("{dockerfile}: {e}"));
    let want = declared(&text, &repo_dir());
    let layout = Layout::open(&dist.join(format!("images/{name}.oci.tar")));
    let mut tagged = layout.manifests();
    assert_eq!(tagged.len(), 1, "{name}: one tagged image index");
    let (tag, index) = tagged.remove(0);
    assert_eq!(tag, version, "{name}: tagged with the release version");
    assert_eq!(
        index["mediaType"], "application/vnd.oci.image.index.v1+json",
        "{name}: a multi-platform image index"
    );
    let platforms = index["manifests"].as_array().expect("index manifests");
    assert!(!platforms.is_empty(), "{name}: no platform in the index");
    for entry in platforms {
        let arch = entry["platform"]["architecture"].as_str().expect("arch");
        let manifest = layout.blob_json(entry["digest"].as_str().expect("digest"));
        let config = layout.blob_json(
            manifest["config"]["digest"]
                .as_str()
                .expect("config digest"),
        );
        let labels: BTreeSet<String> = config["config"]["Labels"]
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        let got = Declared {
            entrypoint: strings(&config["config"]["Entrypoint"]),
            user: config["config"]["User"].as_str().unwrap_or("").to_string(),
            workdir: config["config"]["WorkingDir"]
                .as_str()
                .unwrap_or("")
                .to_string(),
            env: strings(&config["config"]["Env"]).into_iter().collect(),
            ports: ports_of(&config),
            label_keys: labels,
            files: layout
                .files(&manifest)
                .into_iter()
                .filter(|f| !f.ends_with('/'))
                .collect(),
        };
        assert_eq!(
            got, want,
            "{name} linux/{arch}: the image disagrees with {dockerfile}'s final stage"
        );
        assert_eq!(config["os"], "linux");
        assert_eq!(config["architecture"], arch);
        assert!(
            !matches!(got.user.as_str(), "" | "0" | "root" | "0:0"),
            "{name} must not run as root"
        );
        assert!(
            !got.files.contains("bin/sh"),
            "{name}: a distroless-like image has no shell"
        );
    }
}

#[test]
fn operator_image_matches_its_dockerfile() {
    check_service_image("nodewright-operator", "operator/Dockerfile");
}

#[test]
fn webhook_image_matches_its_dockerfile() {
    check_service_image("nodewright-webhook", "webhook/Dockerfile");
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
                ENTRYPOINT [\"/wrong\"]\nRUN a \\\n && b\n# comment\nFROM scratch\nARG V=dev\n\
                COPY --from=build /x /usr/local/bin/x\nCOPY release/rootfs/ /\n\
                COPY --from=build /etc/ssl/ca.crt /etc/ssl/certs/\nENV PATH=/bin\n\
                USER 65532:65532\nexpose 8080 8081/udp\nEXPOSE 9090\n\
                LABEL a.b=\"x y\" \\\n  c.d=\"${V}\"\nENTRYPOINT [\"/usr/local/bin/x\", \"--flag\"]\n";
    let set = |items: &[&str]| items.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
    assert_eq!(
        declared(text, &repo_dir()),
        Declared {
            entrypoint: vec!["/usr/local/bin/x".into(), "--flag".into()],
            user: "65532:65532".into(),
            workdir: "/".into(),
            env: set(&["PATH=/bin"]),
            ports: set(&["8080/tcp", "8081/udp", "9090/tcp"]),
            label_keys: set(&["a.b", "c.d"]),
            files: set(&[
                "usr/local/bin/x",
                "etc/passwd",
                "etc/group",
                "etc/nsswitch.conf",
                "etc/ssl/certs/ca.crt",
            ]),
        }
    );
    assert_eq!(
        declared("FROM a\nENTRYPOINT exec x\n", &repo_dir()).entrypoint,
        ["/bin/sh", "-c", "exec x"]
    );
}
