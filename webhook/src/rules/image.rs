//! `image` must name an image without tag or digest.
//!
//! The operator pulls `image:version`, or `image@containerSHA` when a digest is set. A tag or digest
//! inside `image` would produce `img:1.0:1.0` or `img@sha256:…:1.0`. Upstream silently cut the image at
//! the first `:`, which also mangled registry ports (`registry:5000/img` → `registry`); this port
//! refuses instead and says where the tag or digest belongs (DESIGN §9).

/// Every problem with `image`, each a message completing "spec.packages.K.image: …".
pub fn image_errors(image: &str, version: &str) -> Vec<String> {
    if image.trim().is_empty() {
        return vec![
            "image is empty: set the container image of the package without tag, e.g. ghcr.io/example/tools (the tag comes from version)"
                .to_owned(),
        ];
    }
    let mut errors = Vec::new();
    let (name, digest) = match image.split_once('@') {
        Some((name, digest)) => {
            errors.push(format!(
                "image {image:?} carries the digest {digest:?}: write the image without it ({name:?}) and put the digest in containerSHA"
            ));
            (name, Some(digest))
        }
        None => (image, None),
    };
    // A tag is a ':' in the last path component; one before a '/' is a registry port.
    let last = name.rsplit('/').next().unwrap_or(name);
    if let Some((_, tag)) = last.split_once(':') {
        let bare = &name[..name.len() - tag.len() - 1];
        let hint = if tag == version || digest.is_some() {
            String::new()
        } else {
            format!(
                " (it differs from version {version:?}; set version: {tag:?} if that is the one you want)"
            )
        };
        errors.push(format!(
            "image {image:?} carries the tag {tag:?}: write the image without it ({bare:?}); the tag is taken from version{hint}"
        ));
    }
    if image.chars().any(char::is_whitespace) {
        errors.push(format!(
            "image {image:?} contains whitespace: write the image reference without spaces"
        ));
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepted_images() {
        for image in [
            "ghcr.io/example/tools",
            "tools",
            "registry.example.com:5000/driver-tools",
            "localhost:5000/a/b/c",
            "[::1]:5000/img",
        ] {
            assert_eq!(
                image_errors(image, "1.0.0"),
                Vec::<String>::new(),
                "{image}"
            );
        }
    }

    #[test]
    fn rejected_images_say_where_it_goes() {
        let cases = [
            ("", "image is empty"),
            ("   ", "image is empty"),
            ("ghcr.io/example/tools:1.0.0", "carries the tag \"1.0.0\""),
            (
                "ghcr.io/example/tools:1.0.0",
                "the tag is taken from version",
            ),
            ("tools:latest", "set version: \"latest\""),
            (
                "registry:5000/img:2.0",
                "write the image without it (\"registry:5000/img\")",
            ),
            (
                "ghcr.io/example/tools@sha256:0123",
                "put the digest in containerSHA",
            ),
            (
                "ghcr.io/example/tools@sha256:0123",
                "without it (\"ghcr.io/example/tools\")",
            ),
            ("ghcr.io/x tools", "whitespace"),
        ];
        for (image, want) in cases {
            let errors = image_errors(image, "1.0.0");
            assert!(
                errors.iter().any(|e| e.contains(want)),
                "{image}: {want:?} not in {errors:?}"
            );
        }
        // Digest and tag both: both reported.
        assert_eq!(image_errors("img:1.0@sha256:abc", "1.0").len(), 2);
        // A digest alone is not mistaken for a tag (its ':' is after the '@').
        assert_eq!(image_errors("img@sha256:abc", "1.0").len(), 1);
    }
}
