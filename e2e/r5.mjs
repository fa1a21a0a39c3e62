// FHIR R5 validation for the end-to-end tests, from the official packages
// that scripts/setup prepares under standards/fhir-packages:
//
// 1. the R5 JSON Schema (hl7.fhir.r5.core/package/openapi/fhir.schema.json),
//    compiled once with Ajv: element names and JSON types, primitive
//    formats (id, instant, dateTime, uri, ...), required complex elements;
// 2. what that schema cannot say, read from the same package's
//    StructureDefinitions (snapshots): elements of minimum cardinality 1
//    that are primitives (the schema leaves them out of `required`, since
//    `_status` alone may stand for `status`), and codes bound `required`
//    to a value set the hl7.fhir.r5.expansions package enumerates;
// 3. FHIR JSON rules: no null, no empty object, array or string.
//
// Invariants (FHIRPath constraints) and extensible bindings are not checked.
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import Ajv from 'ajv';

const require = createRequire(import.meta.url);
const root = fileURLToPath(new URL('..', import.meta.url));
const packages = `${root}standards/fhir-packages`;
export const schemaPath = `${packages}/hl7.fhir.r5.core/package/openapi/fhir.schema.json`;
const corePackage = `${packages}/hl7.fhir.r5.core/package`;
const expansionsPackage = `${packages}/hl7.fhir.r5.expansions/package`;
export const examplesPackage = `${packages}/hl7.fhir.r5.examples/package`;

const readJSON = (path) => JSON.parse(readFileSync(path, 'utf8'));

/**
 * Compiles the R5 schema and returns a validator. Compiling takes a few
 * seconds: do it once per test file.
 */
export function loadR5() {
  if (!existsSync(schemaPath)) {
    throw new Error(`${schemaPath} is missing: run scripts/setup`);
  }
  const schema = readJSON(schemaPath);
  // The schema is draft-06 with the draft-04 `id`; Ajv 8 wants `$id`. Its
  // `discriminator` (with a mapping Ajv does not support) is left to
  // strict: false to ignore: each definition pins resourceType with const.
  schema.$id = schema.id;
  delete schema.id;
  const ajv = new Ajv({
    strict: false,
    allErrors: true,
    // The schema's decimal pattern has a stray '}' that a unicode RegExp
    // refuses; decimals are JSON numbers, which patterns do not apply to.
    unicodeRegExp: false,
    // Optimising the code of 4 MB of schema costs more than it saves here.
    code: { optimize: false },
  });
  ajv.addMetaSchema(require('ajv/dist/refs/json-schema-draft-06.json'));
  ajv.addSchema(schema, 'fhir');
  const definitions = new Set(Object.keys(schema.definitions));
  // The top-level oneOf (every resource type), compiled once: it compiles
  // every definition, which the per-type validators then share.
  const any = ajv.getSchema('fhir');

  const structureDefinitions = new Map();
  function structure(type) {
    if (!structureDefinitions.has(type)) {
      const path = `${corePackage}/StructureDefinition-${type}.json`;
      let elements = null;
      if (existsSync(path)) {
        elements = new Map();
        for (const e of readJSON(path).snapshot.element) {
          if (!e.sliceName) elements.set(e.path, e);
        }
      }
      structureDefinitions.set(type, elements);
    }
    return structureDefinitions.get(type);
  }

  const valueSets = new Map();
  /** The codes of a value set, or null when the package does not enumerate it. */
  function codesOf(canonical) {
    const url = canonical.split('|')[0];
    if (!valueSets.has(url)) {
      let codes = null;
      const path = `${expansionsPackage}/ValueSet-${url.split('/').pop()}.json`;
      if (existsSync(path)) {
        const vs = readJSON(path);
        if (vs.url === url && vs.expansion?.contains) {
          codes = new Set();
          const add = (list) => {
            for (const c of list) {
              if (c.code && !c.abstract) codes.add(c.code);
              if (c.contains) add(c.contains);
            }
          };
          add(vs.expansion.contains);
        }
      }
      valueSets.set(url, codes);
    }
    return valueSets.get(url);
  }

  const capital = (s) => s[0].toUpperCase() + s.slice(1);
  const isComplexType = (code) => /^[A-Z]/.test(code);

  /** Checks value against the children of path in a StructureDefinition. */
  function checkElement(value, elements, path, where, problems, nested) {
    if (value === null || typeof value !== 'object' || Array.isArray(value)) return;
    const prefix = `${path}.`;
    for (const [childPath, def] of elements) {
      if (!childPath.startsWith(prefix) || childPath.slice(prefix.length).includes('.')) continue;
      const name = childPath.slice(prefix.length);
      const types = def.type ?? [];
      // JSON property names and the type of each: value[x] is valueString, ...
      const keys = name.endsWith('[x]')
        ? types.map((t) => [name.slice(0, -3) + capital(t.code), t.code])
        : [[name, types[0]?.code]];
      const present = keys.filter(([k]) => k in value || `_${k}` in value);
      if (def.min >= 1 && present.length === 0) {
        problems.push(`${where}: ${name} is required (${def.min}..${def.max})`);
      }
      for (const [key, code] of present) {
        if (!(key in value)) continue;
        const items = Array.isArray(value[key]) ? value[key] : [value[key]];
        items.forEach((item, i) => {
          const at = Array.isArray(value[key]) ? `${where}.${key}[${i}]` : `${where}.${key}`;
          if (def.contentReference) {
            checkElement(item, elements, def.contentReference.replace(/^.*#/, ''), at, problems, nested);
          } else if (code === 'BackboneElement' || code === 'Element') {
            checkElement(item, elements, childPath, at, problems, nested);
          } else if (code === 'Resource') {
            nested.push([item, at]);
          } else if (code && isComplexType(code)) {
            const sd = structure(code);
            if (sd) checkElement(item, sd, code, at, problems, nested);
          } else {
            problems.push(...primitiveProblems(item, code, at));
            if (def.binding?.strength === 'required' && typeof item === 'string') {
              const codes = codesOf(def.binding.valueSet);
              if (codes && !codes.has(item)) {
                problems.push(`${at}: "${item}" is not in the required value set ${def.binding.valueSet}`);
              }
            }
          }
        });
      }
    }
  }

  /**
   * What the schema's primitive definitions miss: base64Binary has no
   * pattern, and patterns do not apply to the JSON numbers of integers.
   */
  function primitiveProblems(value, code, at) {
    switch (code) {
      case 'base64Binary':
        return typeof value === 'string' && /^([A-Za-z0-9+/]{4})*([A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/.test(value)
          ? []
          : [`${at}: not Base64`];
      case 'integer':
      case 'unsignedInt':
      case 'positiveInt': {
        const min = { integer: -2147483648, unsignedInt: 0, positiveInt: 1 }[code];
        return Number.isInteger(value) && value >= min && value <= 2147483647 ? [] : [`${at}: ${JSON.stringify(value)} is not a ${code}`];
      }
      default:
        return [];
    }
  }

  /** FHIR JSON: no null (outside the arrays of primitive extensions), no empty object, array or string. */
  function checkJSON(value, where, problems, inArray = false) {
    if (value === null) {
      if (!inArray) problems.push(`${where}: null is not allowed`);
    } else if (Array.isArray(value)) {
      if (value.length === 0) problems.push(`${where}: an empty array is not allowed (leave the element out)`);
      value.forEach((v, i) => checkJSON(v, `${where}[${i}]`, problems, true));
    } else if (typeof value === 'object') {
      const keys = Object.keys(value);
      if (keys.length === 0) problems.push(`${where}: an empty object is not allowed`);
      for (const k of keys) checkJSON(value[k], `${where}.${k}`, problems);
    } else if (value === '') {
      problems.push(`${where}: an empty string is not allowed`);
    }
  }

  /** JSON pointers of the resources inside a resource (Bundle entries, outcomes, contained). */
  function innerResources(value, pointer = '', out = []) {
    if (value && typeof value === 'object') {
      if (pointer !== '' && !Array.isArray(value) && typeof value.resourceType === 'string') {
        out.push(pointer);
        return out;
      }
      for (const [k, v] of Object.entries(value)) innerResources(v, `${pointer}/${k}`, out);
    }
    return out;
  }

  function schemaProblems(resource, where) {
    const type = resource?.resourceType;
    const validate = typeof type === 'string' && definitions.has(type) ? ajv.getSchema(`fhir#/definitions/${type}`) : any;
    if (validate(resource)) return [];
    // A resource inside that fails makes the ResourceList oneOf report a
    // failure for every resource type: each inner resource is validated on
    // its own instead, so errors inside one are left to that check.
    const inner = innerResources(resource);
    const own = (validate.errors ?? []).filter(
      (e) => !inner.some((p) => e.instancePath === p || e.instancePath.startsWith(`${p}/`)),
    );
    return own.slice(0, 20).map((e) => {
      const detail = e.params?.additionalProperty ? ` (${e.params.additionalProperty})` : '';
      return `${where}${e.instancePath.replaceAll('/', '.')}: ${e.message}${detail}`;
    });
  }

  /**
   * Validates a resource and every resource inside it. Returns the
   * problems (empty when valid) and the types of the resources checked,
   * outermost first.
   */
  function validate(resource, where = resource?.resourceType ?? 'resource') {
    const problems = [];
    const checked = [];
    checkJSON(resource, where, problems);
    const queue = [[resource, where]];
    while (queue.length > 0) {
      const [r, at] = queue.shift();
      checked.push(r?.resourceType ?? '(no resourceType)');
      problems.push(...schemaProblems(r, at));
      const sd = typeof r?.resourceType === 'string' ? structure(r.resourceType) : null;
      if (!sd) {
        problems.push(`${at}: ${JSON.stringify(r?.resourceType)} is not an R5 resource type`);
        continue;
      }
      const nested = [];
      checkElement(r, sd, r.resourceType, at, problems, nested);
      queue.push(...nested);
    }
    return { problems, checked };
  }

  return { validate };
}
