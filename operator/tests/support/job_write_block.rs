//! A write to Jobs the apiserver refuses from a moment the test chooses: a ValidatingAdmissionPolicy
//! (the apiserver's own CEL admission, no webhook) denying one operation on the Jobs of one
//! namespace. It stands in for a request that fails between two writes of the operator (a 5xx, a
//! lost leadership term, a killed process), so the state such a failure leaves is real and the next
//! operator has to finish the work from it.

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use nodewright_e2e::Cluster;
use nodewright_shared::keys;
use serde_json::json;

use super::BOUND;

/// Which write is refused.
#[derive(Clone, Copy, Debug)]
pub enum Refused {
    /// Deleting any Job of the namespace.
    Delete,
    /// An update that leaves `nodewright.nvidia.com/state-recorded` on a Job (the operator's mark
    /// that an outcome was recorded).
    Marking,
}

/// The policy and its binding; [`JobWriteBlock::lift`] removes them.
pub struct JobWriteBlock {
    client: kube::Client,
    name: String,
    probe: Api<Job>,
}

impl JobWriteBlock {
    /// Installs the policy for the Jobs of `ns` and returns once the apiserver enforces it: a
    /// dry-run of the refused write on a suspended probe Job (no labels the operator watches) is
    /// denied.
    pub async fn install(
        cluster: &Cluster,
        client: &kube::Client,
        ns: &str,
        what: Refused,
    ) -> Self {
        let name = format!("{ns}-{}", what.slug());
        let (operations, expression) = match what {
            Refused::Delete => (json!(["DELETE"]), "false".to_owned()),
            Refused::Marking => (
                json!(["UPDATE"]),
                format!(
                    "!has(object.metadata.annotations) || !('{}' in object.metadata.annotations)",
                    keys::STATE_RECORDED_ANNOTATION
                ),
            ),
        };
        let policy: ValidatingAdmissionPolicy = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [{
                    "apiGroups": ["batch"], "apiVersions": ["v1"],
                    "operations": operations, "resources": ["jobs"],
                }]},
                "validations": [{
                    "expression": expression,
                    "message": format!("test: {} refused", what.slug()),
                }],
            },
        }))
        .expect("policy");
        let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {
                "policyName": name,
                "validationActions": ["Deny"],
                "matchResources": {"namespaceSelector": {
                    "matchLabels": {"kubernetes.io/metadata.name": ns},
                }},
            },
        }))
        .expect("binding");
        Api::<ValidatingAdmissionPolicy>::all(client.clone())
            .create(&PostParams::default(), &policy)
            .await
            .expect("policy created");
        Api::<ValidatingAdmissionPolicyBinding>::all(client.clone())
            .create(&PostParams::default(), &binding)
            .await
            .expect("binding created");
        let probe: Api<Job> = Api::namespaced(client.clone(), ns);
        let job: Job = serde_json::from_value(json!({
            "metadata": {"name": format!("probe-{}", what.slug())},
            "spec": {
                "suspend": true,
                "template": {"spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "probe", "image": "registry.invalid/probe"}],
                }},
            },
        }))
        .expect("probe");
        probe
            .create(&PostParams::default(), &job)
            .await
            .expect("probe Job created");
        let block = JobWriteBlock {
            client: client.clone(),
            name,
            probe,
        };
        cluster
            .wait_for("the apiserver enforcing the policy", BOUND, || async {
                Ok(block.refused(what).await.then_some(()))
            })
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        block
    }

    /// Removes the policy and returns once the apiserver no longer enforces it.
    pub async fn lift(self, cluster: &Cluster, what: Refused) {
        Api::<ValidatingAdmissionPolicyBinding>::all(self.client.clone())
            .delete(&self.name, &DeleteParams::default())
            .await
            .expect("binding deleted");
        Api::<ValidatingAdmissionPolicy>::all(self.client.clone())
            .delete(&self.name, &DeleteParams::default())
            .await
            .expect("policy deleted");
        cluster
            .wait_for(
                "the apiserver no longer enforcing the policy",
                BOUND,
                || async { Ok((!self.refused(what).await).then_some(())) },
            )
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }

    /// Whether a dry run of the refused write on the probe is denied.
    async fn refused(&self, what: Refused) -> bool {
        let name = format!("probe-{}", what.slug());
        let result = match what {
            Refused::Delete => self
                .probe
                .delete(
                    &name,
                    &DeleteParams {
                        dry_run: true,
                        ..DeleteParams::default()
                    },
                )
                .await
                .map(|_| ()),
            Refused::Marking => self
                .probe
                .patch(
                    &name,
                    &PatchParams {
                        dry_run: true,
                        ..PatchParams::default()
                    },
                    &Patch::Merge(json!({"metadata": {"annotations": {
                        keys::STATE_RECORDED_ANNOTATION: "complete",
                    }}})),
                )
                .await
                .map(|_| ()),
        };
        result.is_err()
    }
}

impl Refused {
    fn slug(self) -> &'static str {
        match self {
            Refused::Delete => "deleting-jobs",
            Refused::Marking => "marking-jobs",
        }
    }
}
