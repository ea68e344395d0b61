import { badParam, shownValue } from "./http.js";
import { ANY_OBJECT, compileSchema, type SchemaNode } from "../engine/json/schema.js";
import { UsageError } from "../util/errors.js";

type Body = Record<string, unknown>;
const typeName = (v: unknown): string => (v === null ? "null" : Array.isArray(v) ? "array" : typeof v);
const isObj = (v: unknown): v is Body => typeof v === "object" && v !== null && !Array.isArray(v);

/**
 * `response_format` of /v1/chat/completions: undefined for free text ({"type": "text"} or absent), else the grammar the
 * output is constrained to — any object for {"type": "json_object"} (OpenAI's JSON mode), the compiled schema for
 * {"type": "json_schema", "json_schema": {"name", "schema", "strict"}}. A schema the compiler cannot honour is a 400
 * naming the keyword.
 */
export function responseFormatField(body: Body): SchemaNode | undefined {
  const rf = body["response_format"];
  if (rf === undefined || rf === null) return undefined;
  if (!isObj(rf)) throw badParam("response_format", `'response_format' must be an object, got ${typeName(rf)}`);
  const type = rf["type"];
  if (type === "text") return undefined;
  if (type === "json_object") return ANY_OBJECT;
  if (type !== "json_schema")
    throw badParam(
      "response_format",
      `'response_format.type' must be "text", "json_object" or "json_schema", got ${shownValue(type ?? typeName(type))}`,
      "unsupported_parameter",
    );
  const js = rf["json_schema"];
  if (!isObj(js))
    throw badParam("response_format", `'response_format.json_schema' must be an object, got ${typeName(js)}`);
  if (typeof js["name"] !== "string")
    throw badParam("response_format", "'response_format.json_schema.name' must be a string");
  const strict = js["strict"];
  if (strict !== undefined && strict !== null && typeof strict !== "boolean")
    throw badParam(
      "response_format",
      `'response_format.json_schema.strict' must be a boolean, got ${typeName(strict)}`,
    );
  // no schema: nothing more is asked than JSON mode's object
  const schema = js["schema"];
  if (schema === undefined || schema === null) return ANY_OBJECT;
  try {
    return compileSchema(schema);
  } catch (e) {
    if (e instanceof UsageError)
      throw badParam("response_format", `'response_format.json_schema.schema': ${e.message}`, "unsupported_parameter");
    throw e;
  }
}
