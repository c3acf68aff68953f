/**
 * Typed `spec.params`: declare the fields, get them checked, and refusals
 * that name the field, worded as the Rust SDK words them (so a policy gives
 * the same answer in every language, and golden cases hold for all).
 *
 *     const FanoutParams = params("FanoutParams", {
 *       replicas: field(u32, 1),
 *       image: field(string),
 *       command: field(listOf(string), []),
 *     });
 *     const p = FanoutParams.parse(job.paramsJson); // p.replicas: number
 *
 * Field names are the JSON (camelCase) names. A field without a default is
 * required; a field the schema does not declare is refused.
 */

import { InvalidParams } from "./result.js";

class Refusal {
  constructor(
    readonly message: string,
    readonly path: string[] = [],
  ) {}
  under(segment: string): Refusal {
    return new Refusal(this.message, [segment, ...this.path]);
  }
}

/** How serde names a JSON value it did not expect. */
function unexpected(value: unknown): string {
  if (value === null) return "null";
  if (typeof value === "boolean") return `boolean \`${value}\``;
  if (typeof value === "number") {
    return Number.isInteger(value) ? `integer \`${value}\`` : `floating point \`${value}\``;
  }
  if (typeof value === "string") return `string ${JSON.stringify(value)}`;
  return Array.isArray(value) ? "sequence" : "map";
}

/** A JSON type a field may hold. */
export interface Kind<T> {
  readonly expected: string;
  read(value: unknown): T;
}

const refuse = (value: unknown, expected: string): Refusal =>
  new Refusal(`invalid type: ${unexpected(value)}, expected ${expected}`);

function integer(expected: string, min: number, max: number): Kind<number> {
  return {
    expected,
    read(value) {
      if (typeof value !== "number" || !Number.isInteger(value)) throw refuse(value, expected);
      if (value < min || value > max) {
        throw new Refusal(`invalid value: integer \`${value}\`, expected ${expected}`);
      }
      return value;
    },
  };
}

export const u32: Kind<number> = integer("u32", 0, 2 ** 32 - 1);
export const u64: Kind<number> = integer("u64", 0, Number.MAX_SAFE_INTEGER);
export const i64: Kind<number> = integer("i64", Number.MIN_SAFE_INTEGER, Number.MAX_SAFE_INTEGER);

export const string: Kind<string> = {
  expected: "a string",
  read(value) {
    if (typeof value !== "string") throw refuse(value, this.expected);
    return value;
  },
};

export const boolean: Kind<boolean> = {
  expected: "a boolean",
  read(value) {
    if (typeof value !== "boolean") throw refuse(value, this.expected);
    return value;
  },
};

export const f64: Kind<number> = {
  expected: "f64",
  read(value) {
    if (typeof value !== "number") throw refuse(value, this.expected);
    return value;
  },
};

/** Any JSON value, unchecked. */
export const anyJson: Kind<unknown> = { expected: "any value", read: (value) => value };

/** A JSON array of one kind. */
export function listOf<T>(item: Kind<T>): Kind<T[]> {
  return {
    expected: "a sequence",
    read(value) {
      if (!Array.isArray(value)) throw refuse(value, this.expected);
      return value.map((element, index) => {
        try {
          return item.read(element);
        } catch (error) {
          throw error instanceof Refusal ? error.under(`[${index}]`) : error;
        }
      });
    },
  };
}

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value);

/** A JSON object with string keys and values of one kind (keys sorted). */
export function mapOf<T>(item: Kind<T>): Kind<Record<string, T>> {
  return {
    expected: "a map",
    read(value) {
      if (!isObject(value)) throw refuse(value, this.expected);
      const entries: Record<string, T> = {};
      for (const key of Object.keys(value).sort()) {
        try {
          entries[key] = item.read(value[key]);
        } catch (error) {
          throw error instanceof Refusal ? error.under(key) : error;
        }
      }
      return entries;
    },
  };
}

/** A value of one kind, or `null` (read as `undefined`). */
export function nullable<T>(inner: Kind<T>): Kind<T | undefined> {
  return {
    expected: inner.expected,
    read: (value) => (value === null ? undefined : inner.read(value)),
  };
}

/** One declared param: its kind and, unless required, its default. */
export interface Field<T> {
  kind: Kind<T>;
  default?: T;
  required: boolean;
}

export function field<T>(kind: Kind<T>, ...fallback: [] | [T]): Field<T> {
  return fallback.length === 0
    ? { kind, required: true }
    : { kind, default: fallback[0], required: false };
}

type Values<F extends Record<string, Field<any>>> = {
  [K in keyof F]: F[K] extends Field<infer T> ? T : never;
};

/** A params schema: `parse(text)` reads `spec.params` (blank reads as `{}`),
 * throwing `InvalidParams` that names the field. A schema is also the kind
 * of a nested object (`field(nullable(Scratch), undefined)`), whose
 * refusals name the path (`params.scratch.size: …`), as serde's do. */
export interface ParamsSchema<V> extends Kind<V> {
  readonly name: string;
  parse(text: string): V;
}

export function params<F extends Record<string, Field<any>>>(
  name: string,
  fields: F,
): ParamsSchema<Values<F>> {
  const names = Object.keys(fields);
  const read = (value: unknown): Values<F> => {
    if (!isObject(value)) {
      throw new Refusal(`invalid type: ${unexpected(value)}, expected struct ${name}`);
    }
    const result: Record<string, unknown> = {};
    for (const [key, item] of Object.entries(value)) {
      const declared = Object.prototype.hasOwnProperty.call(fields, key) ? fields[key] : undefined;
      if (declared === undefined) throw new Refusal(unknownField(key, names)).under(key);
      try {
        result[key] = declared.kind.read(item);
      } catch (error) {
        throw error instanceof Refusal ? error.under(key) : error;
      }
    }
    for (const key of names) {
      if (key in result) continue;
      const declared = fields[key];
      if (declared.required) throw new Refusal(`missing field \`${key}\``);
      // A fresh copy per parse; `undefined` (a nullable field's default) as it is,
      // not the `null` a JSON round trip would make of it.
      const fallback = declared.default;
      result[key] = fallback === undefined ? undefined : JSON.parse(JSON.stringify(fallback));
    }
    return result as Values<F>;
  };
  return {
    name,
    expected: `struct ${name}`,
    read,
    parse(text) {
      let value: unknown;
      try {
        value = text.trim() === "" ? {} : JSON.parse(text);
      } catch (error) {
        throw new InvalidParams(`params: ${(error as Error).message}`);
      }
      try {
        return read(value);
      } catch (error) {
        if (error instanceof Refusal) throw new InvalidParams(describe(error));
        throw error;
      }
    },
  };
}

function unknownField(key: string, names: string[]): string {
  const quoted = names.map((n) => `\`${n}\``);
  if (quoted.length === 0) return `unknown field \`${key}\`, there are no fields`;
  if (quoted.length === 1) return `unknown field \`${key}\`, expected ${quoted[0]}`;
  if (quoted.length === 2) return `unknown field \`${key}\`, expected ${quoted[0]} or ${quoted[1]}`;
  return `unknown field \`${key}\`, expected one of ${quoted.join(", ")}`;
}

/** `params.replicas: …`, `params.command[0]: …`, `params: …`. */
function describe(refusal: Refusal): string {
  const path = refusal.path.map((s) => (s.startsWith("[") ? s : `.${s}`)).join("");
  return `params${path}: ${refusal.message}`;
}
