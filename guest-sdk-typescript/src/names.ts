/**
 * Kubernetes' rules for names, label keys and values, ConfigMap keys and
 * environment variable names, as apimachinery's `util/validation` states
 * them: the same rules and reasons as the host and the Rust SDK (`names/`).
 * `names/cases.json` holds the cases every implementation must agree on.
 *
 * Each rule returns `undefined` for a valid text, else the reason it breaks.
 */

export type Rule = (text: string) => string | undefined;

const EMPTY = "must not be empty";
const OVER_63 = "must be at most 63 characters";
const OVER_253 = "must be at most 253 characters";
const ENDS = "must start and end with a letter or digit";

/**
 * Whether `text` is longer than `limit` bytes of UTF-8. A UTF-16 unit is one
 * to three bytes (a surrogate pair four), so most texts are decided by their
 * length alone, without encoding them: these checks run for every label of
 * every child.
 */
function over(text: string, limit: number): boolean {
  if (text.length > limit) return true;
  if (text.length * 3 <= limit) return false;
  return new TextEncoder().encode(text).length > limit;
}

/** A DNS-1123 label: a container name, a Service port name. */
export function dns1123Label(name: string): string | undefined {
  if (name === "") return EMPTY;
  if (over(name, 63)) return OVER_63;
  if (!/^[a-z0-9-]*$/.test(name)) return "must consist of lower-case letters, digits and '-'";
  if (name.startsWith("-") || name.endsWith("-")) return ENDS;
  return undefined;
}

/** A DNS-1123 subdomain: most objects' names. */
export function dns1123Subdomain(name: string): string | undefined {
  if (name === "") return EMPTY;
  if (over(name, 253)) return OVER_253;
  // One test decides a valid name, the common case; a second finds the reason.
  if (/^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$/.test(name)) return undefined;
  if (!/^[a-z0-9.-]*$/.test(name)) return "must consist of lower-case letters, digits, '-' and '.'";
  return "each dot-separated part must start and end with a letter or digit";
}

/** A DNS-1035 label: a Service's name. */
export function dns1035Label(name: string): string | undefined {
  const reason = dns1123Label(name);
  if (reason !== undefined) return reason;
  return /^[a-z]/.test(name) ? undefined : "must start with a lower-case letter";
}

function qualifiedPart(part: string, allowEmpty: boolean): string | undefined {
  if (part === "") return allowEmpty ? undefined : EMPTY;
  if (over(part, 63)) return OVER_63;
  if (/^[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$/.test(part)) return undefined;
  if (!/^[A-Za-z0-9_.-]*$/.test(part)) return "must consist of letters, digits, '-', '_' and '.'";
  return ENDS;
}

/** A label or annotation key: an optional DNS-1123 subdomain prefix and `/`, then a qualified name. */
export function labelKey(key: string): string | undefined {
  const slash = key.indexOf("/");
  if (slash < 0) return qualifiedPart(key, false);
  return dns1123Subdomain(key.slice(0, slash)) ?? qualifiedPart(key.slice(slash + 1), false);
}

/** A label value: empty, or a qualified name. */
export function labelValue(value: string): string | undefined {
  return qualifiedPart(value, true);
}

/** An environment variable name. */
export function envVarName(name: string): string | undefined {
  return /^[A-Za-z_.-][A-Za-z0-9_.-]*$/.test(name)
    ? undefined
    : "must consist of letters, digits, '-', '.' and '_', not starting with a digit";
}

/** A ConfigMap data key. */
export function configMapKey(key: string): string | undefined {
  const valid = !over(key, 253) && key !== "." && key !== ".." && /^[A-Za-z0-9_.-]+$/.test(key);
  return valid ? undefined : "must be 1-253 letters, digits, '-', '.' or '_', and not '.' or '..'";
}

/** Every rule, by the name `names/cases.json` uses. */
export const RULES: Record<string, Rule> = {
  dns1123Label,
  dns1123Subdomain,
  dns1035Label,
  labelKey,
  labelValue,
  envVarName,
  configMapKey,
};
