//! Golden shapes: the complete Job objects for one package stage and one interrupt, as the API server
//! receives them. Any change here changes what runs on every node (or, for the name and the template
//! hash, makes a new operator version recreate in-flight Jobs), so it must be deliberate.

use nodewright_shared::api::{Interrupt, InterruptType};
use nodewright_shared::node_state::Stage;
use serde_json::Value;

use super::test_support::{config, nodewright, package};
use super::{InterruptJobInput, PackageJobInput, build_interrupt_job, build_package_job};

fn parse(text: &str) -> Value {
    serde_json::from_str(text).expect("golden JSON parses")
}

#[test]
fn package_job_golden() {
    let nw = nodewright();
    let cfg = config();
    let pkg = package();
    let job = build_package_job(&PackageJobInput {
        nodewright: &nw,
        package_key: "dax",
        package: &pkg,
        stage: Stage::Apply,
        node: "node-1",
        node_order: 3,
        config: &cfg,
    })
    .expect("job builds");
    let actual = serde_json::to_value(&job).expect("job serialises");
    assert_eq!(actual, parse(PACKAGE_JOB));
}

#[test]
fn interrupt_job_golden() {
    let nw = nodewright();
    let cfg = config();
    let pkg = package();
    let reboot = Interrupt {
        kind: InterruptType::Reboot,
        services: vec![],
    };
    let job = build_interrupt_job(&InterruptJobInput {
        nodewright: &nw,
        owner_key: "dax",
        owner: &pkg,
        interrupt: &reboot,
        stage: Stage::Interrupt,
        node: "node-1",
        node_order: 3,
        config: &cfg,
    })
    .expect("job builds");
    let actual = serde_json::to_value(&job).expect("job serialises");
    assert_eq!(actual, parse(INTERRUPT_JOB));
}

const PACKAGE_JOB: &str = r#"
{
  "apiVersion": "batch/v1",
  "kind": "Job",
  "metadata": {
    "annotations": {
      "nodewright.nvidia.com/package": "{\"name\":\"dax\",\"version\":\"1.2.3\",\"nodewright\":\"gpu\",\"stage\":\"apply\",\"image\":\"ghcr.io/nvidia/dax\"}",
      "nodewright.nvidia.com/template-hash": "sha256:5cccb5cb316949d7fbfd994ba54c0d2ecf3e7275aeec205ed014cb3d24e2524a"
    },
    "labels": {
      "nodewright.nvidia.com/name": "gpu",
      "nodewright.nvidia.com/node": "node-1",
      "nodewright.nvidia.com/package": "dax-1.2.3",
      "nodewright.nvidia.com/stage": "apply"
    },
    "name": "gpu-dax-1-2-3-apply-node-1-afd7c572e3c7",
    "namespace": "nodewright",
    "ownerReferences": [
      {
        "apiVersion": "nodewright.nvidia.com/v1alpha1",
        "blockOwnerDeletion": true,
        "controller": true,
        "kind": "NodeWright",
        "name": "gpu",
        "uid": "0b6c2a5e-uid"
      }
    ]
  },
  "spec": {
    "backoffLimit": 3,
    "completions": 1,
    "parallelism": 1,
    "podFailurePolicy": {
      "rules": [
        {
          "action": "Ignore",
          "onPodConditions": [
            {
              "status": "True",
              "type": "DisruptionTarget"
            }
          ]
        }
      ]
    },
    "podReplacementPolicy": "Failed",
    "template": {
      "metadata": {
        "annotations": {
          "nodewright.nvidia.com/package": "{\"name\":\"dax\",\"version\":\"1.2.3\",\"nodewright\":\"gpu\",\"stage\":\"apply\",\"image\":\"ghcr.io/nvidia/dax\"}"
        },
        "labels": {
          "nodewright.nvidia.com/name": "gpu",
          "nodewright.nvidia.com/node": "node-1",
          "nodewright.nvidia.com/package": "dax-1.2.3",
          "nodewright.nvidia.com/stage": "apply"
        }
      },
      "spec": {
        "activeDeadlineSeconds": 3600,
        "automountServiceAccountToken": false,
        "containers": [
          {
            "args": [
              "-v"
            ],
            "image": "registry.k8s.io/pause:3.10",
            "name": "pause",
            "resources": {
              "limits": {
                "cpu": "100m",
                "memory": "20Mi"
              },
              "requests": {
                "cpu": "100m",
                "memory": "20Mi"
              }
            }
          }
        ],
        "hostNetwork": true,
        "hostPID": true,
        "initContainers": [
          {
            "args": [
              "-c",
              "mkdir -p \"/root/${SKYHOOK_DIR}\" && cp -rf /skyhook-package/* \"/root/${SKYHOOK_DIR}\""
            ],
            "command": [
              "/bin/sh"
            ],
            "env": [
              {
                "name": "SKYHOOK_DIR",
                "value": "/var/lib/skyhook/gpu/dax-1.2.3-0b6c2a5e-uid-4"
              }
            ],
            "image": "ghcr.io/nvidia/dax:1.2.3",
            "imagePullPolicy": "Always",
            "name": "dax-init",
            "securityContext": {
              "privileged": true
            },
            "volumeMounts": [
              {
                "mountPath": "/root",
                "mountPropagation": "HostToContainer",
                "name": "root-mount"
              },
              {
                "mountPath": "/skyhook-package/node-metadata",
                "name": "node-metadata"
              }
            ]
          },
          {
            "args": [
              "apply",
              "/root",
              "/var/lib/skyhook/gpu/dax-1.2.3-0b6c2a5e-uid-4"
            ],
            "env": [
              {
                "name": "USER_VAR",
                "value": "x"
              },
              {
                "name": "SKYHOOK_LOG_DIR",
                "value": "/var/log/skyhook/gpu"
              },
              {
                "name": "SKYHOOK_ROOT_DIR",
                "value": "/var/lib/skyhook/gpu"
              },
              {
                "name": "COPY_RESOLV",
                "value": "false"
              },
              {
                "name": "SKYHOOK_RESOURCE_ID",
                "value": "gpu-0b6c2a5e-uid-4_dax_1.2.3"
              },
              {
                "name": "SKYHOOK_NODE_ORDER",
                "value": "3"
              }
            ],
            "image": "ghcr.io/nvidia/skyhook/agent:6.2.0",
            "imagePullPolicy": "Always",
            "name": "dax-apply",
            "securityContext": {
              "privileged": true
            },
            "volumeMounts": [
              {
                "mountPath": "/root",
                "mountPropagation": "HostToContainer",
                "name": "root-mount"
              },
              {
                "mountPath": "/skyhook-package/node-metadata",
                "name": "node-metadata"
              }
            ]
          },
          {
            "args": [
              "apply-check",
              "/root",
              "/var/lib/skyhook/gpu/dax-1.2.3-0b6c2a5e-uid-4"
            ],
            "env": [
              {
                "name": "USER_VAR",
                "value": "x"
              },
              {
                "name": "SKYHOOK_LOG_DIR",
                "value": "/var/log/skyhook/gpu"
              },
              {
                "name": "SKYHOOK_ROOT_DIR",
                "value": "/var/lib/skyhook/gpu"
              },
              {
                "name": "COPY_RESOLV",
                "value": "false"
              },
              {
                "name": "SKYHOOK_RESOURCE_ID",
                "value": "gpu-0b6c2a5e-uid-4_dax_1.2.3"
              },
              {
                "name": "SKYHOOK_NODE_ORDER",
                "value": "3"
              }
            ],
            "image": "ghcr.io/nvidia/skyhook/agent:6.2.0",
            "imagePullPolicy": "Always",
            "name": "dax-applycheck",
            "securityContext": {
              "privileged": true
            },
            "volumeMounts": [
              {
                "mountPath": "/root",
                "mountPropagation": "HostToContainer",
                "name": "root-mount"
              },
              {
                "mountPath": "/skyhook-package/node-metadata",
                "name": "node-metadata"
              }
            ]
          }
        ],
        "nodeName": "node-1",
        "restartPolicy": "Never",
        "tolerations": [
          {
            "effect": "NoSchedule",
            "key": "node.kubernetes.io/unschedulable",
            "operator": "Exists"
          },
          {
            "effect": "NoSchedule",
            "key": "nodewright.nvidia.com",
            "operator": "Equal",
            "value": "runtime-required"
          },
          {
            "effect": "NoSchedule",
            "key": "dedicated",
            "operator": "Equal",
            "value": "gpu"
          }
        ],
        "volumes": [
          {
            "hostPath": {
              "path": "/"
            },
            "name": "root-mount"
          },
          {
            "configMap": {
              "name": "gpu-node-1-metadata-93da3523c607"
            },
            "name": "node-metadata"
          }
        ]
      }
    }
  }
}
"#;

const INTERRUPT_JOB: &str = r#"
{
  "apiVersion": "batch/v1",
  "kind": "Job",
  "metadata": {
    "annotations": {
      "nodewright.nvidia.com/package": "{\"name\":\"dax\",\"version\":\"1.2.3\",\"nodewright\":\"gpu\",\"stage\":\"interrupt\",\"image\":\"ghcr.io/nvidia/dax\"}",
      "nodewright.nvidia.com/template-hash": "sha256:826981b8b9c0ab190d48e81c671db757f7b1e3b3affdf36b8f7b7bdb95570cfa"
    },
    "labels": {
      "nodewright.nvidia.com/interrupt": "True",
      "nodewright.nvidia.com/name": "gpu",
      "nodewright.nvidia.com/node": "node-1",
      "nodewright.nvidia.com/package": "dax-1.2.3",
      "nodewright.nvidia.com/stage": "interrupt"
    },
    "name": "gpu-interrupt-node-1-90dc3f473a76",
    "namespace": "nodewright",
    "ownerReferences": [
      {
        "apiVersion": "nodewright.nvidia.com/v1alpha1",
        "blockOwnerDeletion": true,
        "controller": true,
        "kind": "NodeWright",
        "name": "gpu",
        "uid": "0b6c2a5e-uid"
      }
    ]
  },
  "spec": {
    "activeDeadlineSeconds": 3600,
    "backoffLimit": 2147483647,
    "completions": 1,
    "parallelism": 1,
    "podReplacementPolicy": "Failed",
    "template": {
      "metadata": {
        "annotations": {
          "nodewright.nvidia.com/package": "{\"name\":\"dax\",\"version\":\"1.2.3\",\"nodewright\":\"gpu\",\"stage\":\"interrupt\",\"image\":\"ghcr.io/nvidia/dax\"}"
        },
        "labels": {
          "nodewright.nvidia.com/interrupt": "True",
          "nodewright.nvidia.com/name": "gpu",
          "nodewright.nvidia.com/node": "node-1",
          "nodewright.nvidia.com/package": "dax-1.2.3",
          "nodewright.nvidia.com/stage": "interrupt"
        }
      },
      "spec": {
        "automountServiceAccountToken": false,
        "containers": [
          {
            "args": [
              "-v"
            ],
            "image": "registry.k8s.io/pause:3.10",
            "name": "pause",
            "resources": {
              "limits": {
                "cpu": "100m",
                "memory": "20Mi"
              },
              "requests": {
                "cpu": "100m",
                "memory": "20Mi"
              }
            }
          }
        ],
        "hostNetwork": true,
        "hostPID": true,
        "initContainers": [
          {
            "args": [
              "interrupt",
              "/root",
              "/var/lib/skyhook/gpu/dax-1.2.3-0b6c2a5e-uid-4",
              "eyJ0eXBlIjoibm9kZV9yZXN0YXJ0In0="
            ],
            "env": [
              {
                "name": "SKYHOOK_LOG_DIR",
                "value": "/var/log/skyhook/gpu"
              },
              {
                "name": "SKYHOOK_ROOT_DIR",
                "value": "/var/lib/skyhook/gpu"
              },
              {
                "name": "COPY_RESOLV",
                "value": "false"
              },
              {
                "name": "SKYHOOK_RESOURCE_ID",
                "value": "gpu-0b6c2a5e-uid-4_dax_1.2.3"
              },
              {
                "name": "SKYHOOK_NODE_ORDER",
                "value": "3"
              }
            ],
            "image": "ghcr.io/nvidia/skyhook/agent:6.2.0",
            "imagePullPolicy": "Always",
            "name": "interrupt",
            "resources": {
              "limits": {
                "cpu": "500m",
                "memory": "64Mi"
              },
              "requests": {
                "cpu": "500m",
                "memory": "64Mi"
              }
            },
            "securityContext": {
              "privileged": true
            },
            "volumeMounts": [
              {
                "mountPath": "/root",
                "mountPropagation": "HostToContainer",
                "name": "root-mount"
              }
            ]
          }
        ],
        "nodeName": "node-1",
        "restartPolicy": "OnFailure",
        "tolerations": [
          {
            "effect": "NoSchedule",
            "key": "node.kubernetes.io/unschedulable",
            "operator": "Exists"
          },
          {
            "effect": "NoSchedule",
            "key": "nodewright.nvidia.com",
            "operator": "Equal",
            "value": "runtime-required"
          },
          {
            "effect": "NoSchedule",
            "key": "dedicated",
            "operator": "Equal",
            "value": "gpu"
          }
        ],
        "volumes": [
          {
            "hostPath": {
              "path": "/"
            },
            "name": "root-mount"
          }
        ]
      }
    }
  }
}
"#;
