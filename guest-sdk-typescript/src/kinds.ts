// Generated from guest-sdk/kinds.json by `POLICYHOST_BLESS=1 cargo test -p policyhost-sdk --test
// kinds`: edit that file, not this one.

// What the builders write for each kind of child: its API version and kind, the rule of its name,
// the restart policies it accepts, and the values written when the policy sets none.

import * as names from "./names.js";

/** A kind of child, as its builder writes it. */
export interface Kind {
  readonly apiVersion: string;
  readonly kind: string;
  /** What an error calls its name, e.g. `Pod name`. */
  readonly nameWhat: string;
  readonly nameRule: names.Rule;
}

export const POD: Kind = {
  apiVersion: "v1",
  kind: "Pod",
  nameWhat: "Pod name",
  nameRule: names.dns1123Subdomain,
};

export const JOB: Kind = {
  apiVersion: "batch/v1",
  kind: "Job",
  nameWhat: "Job name",
  nameRule: names.dns1123Label,
};
export const JOB_RESTART_POLICIES: readonly string[] = ["Never", "OnFailure"];
export const JOB_RESTART_POLICY_RULE = "must be Never or OnFailure";

export const CONFIG_MAP: Kind = {
  apiVersion: "v1",
  kind: "ConfigMap",
  nameWhat: "ConfigMap name",
  nameRule: names.dns1123Subdomain,
};

export const SERVICE: Kind = {
  apiVersion: "v1",
  kind: "Service",
  nameWhat: "Service name",
  nameRule: names.dns1035Label,
};
export const SERVICE_TYPE = "ClusterIP";

export const PERSISTENT_VOLUME_CLAIM: Kind = {
  apiVersion: "v1",
  kind: "PersistentVolumeClaim",
  nameWhat: "PersistentVolumeClaim name",
  nameRule: names.dns1123Subdomain,
};
export const PERSISTENT_VOLUME_CLAIM_ACCESS_MODE = "ReadWriteOnce";

export const DEFAULT_RESTART_POLICY = "Never";
export const PORT_PROTOCOL = "TCP";
export const PORT_NAME_MAX_LENGTH = 15;
export const PORT_NAME_LENGTH_RULE = "must be at most 15 characters";
