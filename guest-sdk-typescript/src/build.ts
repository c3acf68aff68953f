/**
 * Builders for the common children, producing valid manifests: each checks
 * names, label keys and values, container names, environment variable names,
 * resource quantities and volumes with the rules of `names.ts`, then writes the
 * object as a `DesiredChild`. The host sets the namespace, the owner
 * reference and the `policyhost.dev/*` labels, so builders leave them out.
 * The manifests are those of the Rust SDK's builders for the same calls.
 *
 *     const worker = new Container("worker", "busybox:1.36").command(["sh", "-c", "work"]);
 *     const pod = new Pod("demo-worker-0").label("app", "demo").container(worker).build();
 *
 * The builders: `Pod` (and `PodTemplate` for many alike), `BatchJob`,
 * `ConfigMap`, `Service` and `PersistentVolumeClaim`, which a Pod declares as
 * a volume (`volumeClaim`) for its containers to mount (`Container.mount`):
 *
 *     const claim = new PersistentVolumeClaim("demo-data").storage("10Gi").build();
 *     const pod = new Pod("demo-worker-1")
 *       .volumeClaim("data", "demo-data")
 *       .container(new Container("worker", "busybox:1.36").mount("data", "/data"))
 *       .build();
 */

import * as kinds from "./kinds.js";
import * as names from "./names.js";
import { type DesiredChild, PolicyError, fromManifest } from "./result.js";

/** A builder refused to build: the message names the value and the rule. */
export class BuildError extends PolicyError {}

/** `text` quoted as the Rust SDK quotes a value in a message (`{:?}`). */
export function quoted(text: string): string {
  let out = '"';
  for (const char of text) {
    const code = char.codePointAt(0)!;
    if (char === '"' || char === "\\") out += "\\" + char;
    else if (char === "\n") out += "\\n";
    else if (char === "\r") out += "\\r";
    else if (char === "\t") out += "\\t";
    else if (char === "\0") out += "\\0";
    else if (code < 0x20 || code === 0x7f) out += `\\u{${code.toString(16)}}`;
    else out += char;
  }
  return out + '"';
}

const invalid = (what: string, value: string, reason: string): BuildError =>
  new BuildError(`${what} ${quoted(value)} is invalid: ${reason}`);

/**
 * The texts each rule found valid: a policy checks the same label keys,
 * values and variable names for every child it builds, and inside a
 * component (a fresh instance per call) a lookup costs far less than a
 * check (a label key's: 1,700 fuel against 59,000). At most 1,000 texts per
 * rule.
 */
const known = new Map<names.Rule, Set<string>>();

function check(what: string, value: string, rule: names.Rule): void {
  let valid = known.get(rule);
  if (valid?.has(value)) return;
  const reason = rule(value);
  if (reason !== undefined) throw invalid(what, value, reason);
  if (valid === undefined) known.set(rule, (valid = new Set()));
  if (valid.size < 1000) valid.add(value);
}

function checkName(kind: kinds.Kind, name: string): void {
  check(kind.nameWhat, name, kind.nameRule);
}

const head = (kind: kinds.Kind) => ({ apiVersion: kind.apiVersion, kind: kind.kind });

function checkLabels(labels: Map<string, string>): void {
  for (const [key, value] of labels) {
    check("label key", key, names.labelKey);
    check("label value", value, names.labelValue);
  }
}

const QUANTITY = /^[+-]?(?=\.?[0-9])[0-9]*\.?[0-9]*([mkMGTPE]|[KMGTPE]i|[eE][+-]?[0-9]+)?$/;

function checkQuantity(value: string): void {
  if (!QUANTITY.test(value)) {
    throw invalid(
      "resource quantity",
      value,
      "must be a number with an optional unit such as m, Mi or Gi",
    );
  }
}

const object = (map: Map<string, string>): Record<string, string> => Object.fromEntries(map);

/** What the kubelet does when a container exits; builders default to `Never`. */
export type RestartPolicy = "Always" | "OnFailure" | "Never";

/**
 * How the nodes may mount a claimed volume; claims default to
 * `ReadWriteOnce`. `ReadWriteMany` is what Pods spread over nodes need to
 * share one volume; `ReadWriteOncePod` goes with no other mode.
 */
export type AccessMode = "ReadWriteOnce" | "ReadOnlyMany" | "ReadWriteMany" | "ReadWriteOncePod";

/** The annotation that declares a child's update strategy: the one `policyhost.dev/*` key a policy sets. */
export const UPDATE_STRATEGY_ANNOTATION = "policyhost.dev/update-strategy";

/**
 * What the host does with a child that exists and no longer matches the
 * policy's manifest: `InPlace` applies the change (the default; a change
 * refused as immutable is the DataJob's `ImmutableChange`); `Recreate`
 * deletes and creates it anew when the change is refused as immutable (a
 * finished Pod keeps its old form, the record of its run); `RecreateAlways`
 * does so on every change; `OnDelete` leaves it until it is gone.
 */
export type UpdateStrategy = "InPlace" | "Recreate" | "RecreateAlways" | "OnDelete";

/** `label` and `annotation`, shared by every builder. */
abstract class Metadata {
  protected labels = new Map<string, string>();
  protected annotations = new Map<string, string>();
  constructor(protected name: string) {}

  /** Sets a label (a key set twice takes the last value). */
  label(key: string, value: string): this {
    this.labels.set(key, value);
    return this;
  }

  /** Sets an annotation (a key set twice takes the last value). */
  annotation(key: string, value: string): this {
    this.annotations.set(key, value);
    return this;
  }

  /** Declares how the host changes this child once it exists. */
  updateStrategy(strategy: UpdateStrategy): this {
    return this.annotation(UPDATE_STRATEGY_ANNOTATION, strategy);
  }

  protected checkMetadata(): void {
    checkLabels(this.labels);
    for (const key of this.annotations.keys()) check("annotation key", key, names.labelKey);
  }

  /** The metadata; with `hole`, the name and the labels are `hole`. */
  protected metadata(hole?: string): Record<string, unknown> {
    const metadata: Record<string, unknown> = { name: hole ?? this.name };
    if (hole !== undefined) metadata.labels = hole;
    else if (this.labels.size > 0) metadata.labels = object(this.labels);
    if (this.annotations.size > 0) metadata.annotations = object(this.annotations);
    return metadata;
  }
}

/** A container of a Pod or Job. */
export class Container {
  private commandLine: string[] = [];
  private argList: string[] = [];
  private envVars = new Map<string, string>();
  private requests = new Map<string, string>();
  private limits = new Map<string, string>();
  private dir?: string;
  private ports: [string, number][] = [];
  private mounts: [string, string][] = [];

  constructor(
    readonly name: string,
    private image: string,
  ) {}

  /** The entrypoint (empty: the image's). */
  command(command: Iterable<string>): this {
    this.commandLine = [...command];
    return this;
  }

  args(args: Iterable<string>): this {
    this.argList = [...args];
    return this;
  }

  /** Sets an environment variable (a name set twice takes the last value). */
  env(name: string, value: string): this {
    this.envVars.set(name, value);
    return this;
  }

  request(resource: string, quantity: string): this {
    this.requests.set(resource, quantity);
    return this;
  }

  limit(resource: string, quantity: string): this {
    this.limits.set(resource, quantity);
    return this;
  }

  workingDir(path: string): this {
    this.dir = path;
    return this;
  }

  /** Declares a TCP port (name: a DNS-1123 label of at most 15 characters). */
  port(name: string, port: number): this {
    this.ports.push([name, port]);
    return this;
  }

  /** Mounts the Pod's volume `volume` (see `volumeClaim`) at `path`, an
   * absolute path without `:`. */
  mount(volume: string, path: string): this {
    this.mounts.push([volume, path]);
    return this;
  }

  /** @internal The volumes it mounts, by name; its Pod checks they are declared. */
  mountedVolumes(): string[] {
    return this.mounts.map(([volume]) => volume);
  }

  /** @internal */
  check(): void {
    check("container name", this.name, names.dns1123Label);
    if (this.image.trim() === "") throw invalid("container image", this.image, "must not be empty");
    for (const name of this.envVars.keys()) check("environment variable name", name, names.envVarName);
    for (const [resource, quantity] of [...this.requests, ...this.limits]) {
      check("resource name", resource, names.labelKey);
      checkQuantity(quantity);
    }
    for (const [name, port] of this.ports) {
      check("container port name", name, names.dns1123Label);
      if (name.length > kinds.PORT_NAME_MAX_LENGTH) {
        throw invalid("container port name", name, kinds.PORT_NAME_LENGTH_RULE);
      }
      if (!(port >= 1 && port <= 65535)) {
        throw invalid("container port", String(port), "must be between 1 and 65535");
      }
    }
    this.mounts.forEach(([, path], i) => {
      // The kubelet splits `path:mode` on the colon.
      if (!path.startsWith("/") || path.includes(":")) {
        throw invalid("mount path", path, "must be an absolute path without ':'");
      }
      // kube-apiserver refuses two mounts at one place.
      if (this.mounts.slice(0, i).some(([, other]) => other === path)) {
        throw invalid("mount path", path, "must be unique");
      }
    });
  }

  /** @internal A copy of its environment variables. */
  variables(): Map<string, string> {
    return new Map(this.envVars);
  }

  /** @internal The manifest; with `hole`, `env` is `hole`. */
  manifest(hole?: string): Record<string, unknown> {
    const container: Record<string, unknown> = { name: this.name, image: this.image };
    if (this.commandLine.length > 0) container.command = [...this.commandLine];
    if (this.argList.length > 0) container.args = [...this.argList];
    if (hole !== undefined) container.env = hole;
    else if (this.envVars.size > 0) container.env = envList(this.envVars);
    if (this.requests.size > 0 || this.limits.size > 0) {
      const resources: Record<string, unknown> = {};
      if (this.requests.size > 0) resources.requests = object(this.requests);
      if (this.limits.size > 0) resources.limits = object(this.limits);
      container.resources = resources;
    }
    if (this.dir !== undefined) container.workingDir = this.dir;
    if (this.ports.length > 0) {
      container.ports = this.ports.map(([name, port]) => ({
        name,
        containerPort: port,
        protocol: kinds.PORT_PROTOCOL,
      }));
    }
    if (this.mounts.length > 0) {
      container.volumeMounts = this.mounts.map(([name, mountPath]) => ({ name, mountPath }));
    }
    return container;
  }
}

/** What a Pod and a Job's Pod template share. */
abstract class PodSpec extends Metadata {
  protected restart = kinds.DEFAULT_RESTART_POLICY as RestartPolicy;
  protected containers: Container[] = [];
  protected account?: string;
  protected selector = new Map<string, string>();
  protected volumes: [string, string][] = [];

  restartPolicy(policy: RestartPolicy): this {
    this.restart = policy;
    return this;
  }

  /** Adds a container (names must be unique). */
  container(container: Container): this {
    this.containers.push(container);
    return this;
  }

  serviceAccount(name: string): this {
    this.account = name;
    return this;
  }

  nodeSelector(key: string, value: string): this {
    this.selector.set(key, value);
    return this;
  }

  /** Declares the volume `volume` (a DNS-1123 label, unique in the Pod),
   * backed by the PersistentVolumeClaim `claim`, for containers to `mount`. */
  volumeClaim(volume: string, claim: string): this {
    this.volumes.push([volume, claim]);
    return this;
  }

  protected checkSpec(kind: string): void {
    if (this.containers.length === 0) throw new BuildError(`${kind} \`${this.name}\` has no containers`);
    const seen = new Set<string>();
    for (const container of this.containers) {
      container.check();
      if (seen.has(container.name)) {
        throw new BuildError(
          `${kind} \`${this.name}\` has two containers named \`${container.name}\``,
        );
      }
      seen.add(container.name);
    }
    if (this.account !== undefined) {
      check("service account name", this.account, names.dns1123Subdomain);
    }
    checkLabels(this.selector);
    this.checkVolumes(kind);
  }

  /** Volume names are unique labels, claims are claim names, and every mount
   * names a declared volume. */
  private checkVolumes(kind: string): void {
    const declared = new Set<string>();
    for (const [volume, claim] of this.volumes) {
      check("volume name", volume, names.dns1123Label);
      if (declared.has(volume)) throw invalid("volume name", volume, "must be unique within the Pod");
      declared.add(volume);
      checkName(kinds.PERSISTENT_VOLUME_CLAIM, claim);
    }
    for (const container of this.containers) {
      for (const volume of container.mountedVolumes()) {
        if (!declared.has(volume)) {
          throw new BuildError(
            `${kind} \`${this.name}\` has no volume \`${volume}\` for container \`${container.name}\` to mount`,
          );
        }
      }
    }
  }

  /** The spec; with `hole`, every container's `env` is `hole`. */
  protected spec(hole?: string): Record<string, unknown> {
    const spec: Record<string, unknown> = {
      restartPolicy: this.restart,
      containers: this.containers.map((c) => c.manifest(hole)),
    };
    if (this.account !== undefined) spec.serviceAccountName = this.account;
    if (this.selector.size > 0) spec.nodeSelector = object(this.selector);
    if (this.volumes.length > 0) {
      spec.volumes = this.volumes.map(([name, claimName]) => ({
        name,
        persistentVolumeClaim: { claimName },
      }));
    }
    return spec;
  }
}

/** A core `v1` Pod; restart policy `Never` unless set. */
export class Pod extends PodSpec {
  private deadline?: number;

  activeDeadlineSeconds(seconds: number): this {
    this.deadline = seconds;
    return this;
  }

  /** Checks the Pod and writes its manifest (throws `BuildError`). */
  build(): DesiredChild {
    checkName(kinds.POD, this.name);
    this.checkMetadata();
    this.checkSpec(kinds.POD.kind);
    return fromManifest(this.manifest());
  }

  /** Checks the Pod once, for many Pods that differ only in their name,
   * labels and environment variables: see `PodTemplate`. */
  template(): PodTemplate {
    this.checkMetadata();
    this.checkSpec(kinds.POD.kind);
    // The manifest's text, cut where each Pod writes its own name, labels
    // and variables; the mark is any text the manifest holds nowhere else.
    const holes = 2 + this.containers.length;
    for (let n = 0; ; n++) {
      const mark = JSON.stringify(`\u0000hole ${n}`);
      const text = JSON.stringify(this.manifest(JSON.parse(mark))).split(mark);
      if (text.length === holes + 1) {
        const variables = this.containers.map((c) => c.variables());
        return new PodTemplate(text, new Map(this.labels), variables);
      }
    }
  }

  private manifest(hole?: string): Record<string, unknown> {
    const spec = this.spec(hole);
    if (this.deadline !== undefined) spec.activeDeadlineSeconds = this.deadline;
    return { ...head(kinds.POD), metadata: this.metadata(hole), spec };
  }
}

/** `vars` as a container's `env`. */
const envList = (vars: Map<string, string>) => [...vars].map(([name, value]) => ({ name, value }));

/** `base` with `own` set over it (a key of both keeps its place, with `own`'s value). */
function merged(base: Map<string, string>, own: Map<string, string>): Map<string, string> {
  if (own.size === 0) return base;
  const all = new Map(base);
  for (const [key, value] of own) all.set(key, value);
  return all;
}

/** `,"key":<value>` for a map with entries, else nothing. */
const member = (key: string, map: Map<string, string>, value: (map: Map<string, string>) => unknown) =>
  map.size > 0 ? `,"${key}":${JSON.stringify(value(map))}` : "";

/** A checked Pod to stamp out: each `pod(name)` gets a name, and labels and
 * environment variables of its own (a label or variable the template sets
 * too takes the Pod's value). The template keeps its manifest as text, so a
 * Pod costs the serialisation of only what it sets, as in the Rust SDK. */
export class PodTemplate {
  /** @internal `text`: the manifest around its holes (the name, the labels,
   * each container's `env`); `variables`: each container's own. */
  constructor(
    private readonly text: string[],
    private readonly labels: Map<string, string>,
    private readonly variables: Map<string, string>[],
  ) {}

  pod(name: string): TemplatePod {
    return new TemplatePod(this, name);
  }

  /** @internal The manifest of the Pod `name` with its own labels and variables. */
  manifest(name: string, labels: Map<string, string>, vars: Map<string, string>): string {
    const text = this.text;
    const cut = (part: string, key: string) => part.slice(0, part.length - `,"${key}":`.length);
    let manifest = text[0] + JSON.stringify(name) + cut(text[1], "labels");
    manifest += member("labels", merged(this.labels, labels), object);
    this.variables.forEach((own, i) => {
      manifest += cut(text[i + 2], "env") + member("env", merged(own, vars), envList);
    });
    return manifest + text[text.length - 1];
  }
}

/** One Pod of a `PodTemplate`. */
export class TemplatePod {
  private labels = new Map<string, string>();
  private envVars = new Map<string, string>();

  constructor(
    private readonly template: PodTemplate,
    private readonly name: string,
  ) {}

  label(key: string, value: string): this {
    this.labels.set(key, value);
    return this;
  }

  /** Sets a variable in every container of this Pod. */
  env(name: string, value: string): this {
    this.envVars.set(name, value);
    return this;
  }

  build(): DesiredChild {
    checkName(kinds.POD, this.name);
    checkLabels(this.labels);
    for (const name of this.envVars.keys()) check("environment variable name", name, names.envVarName);
    const manifest = this.template.manifest(this.name, this.labels, this.envVars);
    return { ...head(kinds.POD), name: this.name, manifest };
  }
}

/** A `batch/v1` Job. Its name is a DNS-1123 label (it becomes a label of its
 * Pods); its labels are also its Pod template's. */
export class BatchJob extends PodSpec {
  private numbers = new Map<string, number>();

  backoffLimit(limit: number): this {
    return this.set("backoffLimit", limit);
  }
  completions(count: number): this {
    return this.set("completions", count);
  }
  parallelism(count: number): this {
    return this.set("parallelism", count);
  }
  activeDeadlineSeconds(seconds: number): this {
    return this.set("activeDeadlineSeconds", seconds);
  }
  ttlSecondsAfterFinished(seconds: number): this {
    return this.set("ttlSecondsAfterFinished", seconds);
  }

  private set(key: string, value: number): this {
    this.numbers.set(key, value);
    return this;
  }

  build(): DesiredChild {
    checkName(kinds.JOB, this.name);
    this.checkMetadata();
    this.checkSpec(kinds.JOB.kind);
    if (!kinds.JOB_RESTART_POLICIES.includes(this.restart)) {
      throw invalid("Job restart policy", this.restart, kinds.JOB_RESTART_POLICY_RULE);
    }
    const order = [
      "backoffLimit",
      "completions",
      "parallelism",
      "activeDeadlineSeconds",
      "ttlSecondsAfterFinished",
    ];
    const spec: Record<string, unknown> = {};
    for (const key of order) if (this.numbers.has(key)) spec[key] = this.numbers.get(key);
    spec.template = {
      metadata: this.labels.size > 0 ? { labels: object(this.labels) } : {},
      spec: this.spec(),
    };
    return fromManifest({ ...head(kinds.JOB), metadata: this.metadata(), spec });
  }
}

/** A core `v1` ConfigMap. */
export class ConfigMap extends Metadata {
  private entries = new Map<string, string>();

  data(key: string, value: string): this {
    this.entries.set(key, value);
    return this;
  }

  build(): DesiredChild {
    checkName(kinds.CONFIG_MAP, this.name);
    this.checkMetadata();
    for (const key of this.entries.keys()) check("ConfigMap key", key, names.configMapKey);
    return fromManifest({ ...head(kinds.CONFIG_MAP), metadata: this.metadata(), data: object(this.entries) });
  }
}

/** A core `v1` Service of type ClusterIP; its name is a DNS-1035 label. */
export class Service extends Metadata {
  private selectorLabels = new Map<string, string>();
  private ports: [string, number, number][] = [];
  private isHeadless = false;

  selector(key: string, value: string): this {
    this.selectorLabels.set(key, value);
    return this;
  }

  port(name: string, port: number, targetPort: number): this {
    this.ports.push([name, port, targetPort]);
    return this;
  }

  /** No cluster IP (`clusterIP: None`): DNS answers with the Pods. */
  headless(): this {
    this.isHeadless = true;
    return this;
  }

  build(): DesiredChild {
    checkName(kinds.SERVICE, this.name);
    this.checkMetadata();
    checkLabels(this.selectorLabels);
    if (this.ports.length === 0 && !this.isHeadless) {
      throw invalid("Service", this.name, "needs at least one port unless headless");
    }
    const seen = new Set<string>();
    for (const [name, port, target] of this.ports) {
      check("Service port name", name, names.dns1123Label);
      const inRange = (n: number) => n >= 1 && n <= 65535;
      if (!inRange(port) || !inRange(target)) {
        throw invalid("Service port", name, "port and target port must be between 1 and 65535");
      }
      if (seen.has(name)) throw invalid("Service port name", name, "must be unique within the Service");
      seen.add(name);
    }
    const spec: Record<string, unknown> = { type: kinds.SERVICE_TYPE };
    if (this.isHeadless) spec.clusterIP = "None";
    if (this.selectorLabels.size > 0) spec.selector = object(this.selectorLabels);
    spec.ports = this.ports.map(([name, port, targetPort]) => ({
      name,
      port,
      targetPort,
      protocol: kinds.PORT_PROTOCOL,
    }));
    return fromManifest({ ...head(kinds.SERVICE), metadata: this.metadata(), spec });
  }
}

/** A core `v1` PersistentVolumeClaim: storage a Pod mounts with
 * `volumeClaim` and `Container.mount`. */
export class PersistentVolumeClaim extends Metadata {
  private request?: string;
  private modes: AccessMode[] = [];
  private className?: string;

  /** The storage requested (`spec.resources.requests.storage`), e.g. `"10Gi"`; required. */
  storage(quantity: string): this {
    this.request = quantity;
    return this;
  }

  /** Adds an access mode (a mode added twice is written once); without one, `ReadWriteOnce`. */
  accessMode(mode: AccessMode): this {
    if (!this.modes.includes(mode)) this.modes.push(mode);
    return this;
  }

  /** The storage class (a DNS-1123 subdomain); without one, the cluster's default class. */
  storageClass(name: string): this {
    this.className = name;
    return this;
  }

  build(): DesiredChild {
    const kind = kinds.PERSISTENT_VOLUME_CLAIM;
    checkName(kind, this.name);
    this.checkMetadata();
    if (this.request === undefined) throw invalid(kind.kind, this.name, "needs a storage request");
    checkQuantity(this.request);
    const modes =
      this.modes.length > 0 ? this.modes : [kinds.PERSISTENT_VOLUME_CLAIM_ACCESS_MODE as AccessMode];
    if (modes.length > 1 && modes.includes("ReadWriteOncePod")) {
      throw invalid("access mode", "ReadWriteOncePod", "may not be combined with other access modes");
    }
    if (this.className !== undefined) {
      check("storage class name", this.className, names.dns1123Subdomain);
    }
    const spec: Record<string, unknown> = {
      accessModes: [...modes],
      resources: { requests: { storage: this.request } },
    };
    if (this.className !== undefined) spec.storageClassName = this.className;
    return fromManifest({ ...head(kind), metadata: this.metadata(), spec });
  }
}
