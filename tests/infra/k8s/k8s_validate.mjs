// Offline Kubernetes manifest validation (see k8s_validate.sh). Each document is checked against the
// kubernetes-models class for its apiVersion/kind (ajv, generated from the upstream OpenAPI spec); --strict
// also type-checks it against the package's TypeScript interfaces, which rejects unknown fields at any depth.
// kubeflow.org/v1 PyTorchJob is not in kubernetes-models: its own fields are checked against the CRD's field
// list below and each replica's pod template is validated as a core/v1 PodTemplate.
import fs from "node:fs";
import path from "node:path";
import yaml from "js-yaml";
import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const args = process.argv.slice(2);
const STRICT = args[0] === "--strict" && args.shift();

const modulePath = (apiVersion, kind) => {
  const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : [null, apiVersion];
  return group ? `kubernetes-models/${group}/${version}/${kind}` : `kubernetes-models/${version}/${kind}`;
};

// API-server rules for batch/v1 Job that the schema cannot express (k8s.io/kubernetes pkg/apis/batch/validation).
function jobRules(job) {
  const errs = [], s = job.spec ?? {}, pod = s.template?.spec ?? {};
  const name = job.metadata?.name ?? "";
  if (!/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/.test(name) || name.length > 63) errs.push(`metadata.name: Invalid value "${name}"`);
  if (!["Never", "OnFailure"].includes(pod.restartPolicy))
    errs.push(`spec.template.spec.restartPolicy: Unsupported value "${pod.restartPolicy}"`);
  if (!pod.containers?.length) errs.push("spec.template.spec.containers: Required value");
  for (const k of ["parallelism", "completions", "backoffLimit"])
    if (typeof s[k] === "number" && s[k] < 0) errs.push(`spec.${k}: must be greater than or equal to 0`);
  if (s.completionMode === "Indexed" && s.completions == null)
    errs.push("spec.completions: Required value: when completion mode is Indexed");
  if (s.podFailurePolicy && pod.restartPolicy !== "Never")
    errs.push("spec.template.spec.restartPolicy: must be Never when podFailurePolicy is set");
  return errs;
}

// Fields of kubeflow.org/v1 PyTorchJob (training-operator CRD kubeflow.org_pytorchjobs.yaml).
const PYTORCHJOB_FIELDS = {
  top: ["apiVersion", "kind", "metadata", "spec", "status"],
  spec: ["elasticPolicy", "nprocPerNode", "pytorchReplicaSpecs", "runPolicy"],
  runPolicy: ["activeDeadlineSeconds", "backoffLimit", "cleanPodPolicy", "managedBy", "schedulingPolicy", "suspend",
              "ttlSecondsAfterFinished"],
  replica: ["replicas", "restartPolicy", "template"],
};
function pytorchJobRules(doc) {
  const errs = [], extra = (obj, allowed, where) => Object.keys(obj ?? {}).filter(k => !allowed.includes(k))
    .forEach(k => errs.push(`${where}.${k}: unknown field`));
  extra(doc, PYTORCHJOB_FIELDS.top, "");
  extra(doc.spec, PYTORCHJOB_FIELDS.spec, "spec");
  extra(doc.spec?.runPolicy, PYTORCHJOB_FIELDS.runPolicy, "spec.runPolicy");
  const replicas = doc.spec?.pytorchReplicaSpecs;
  if (!replicas || typeof replicas !== "object") errs.push("spec.pytorchReplicaSpecs: Required value");
  const templates = [];
  for (const [type, r] of Object.entries(replicas ?? {})) {
    const where = `spec.pytorchReplicaSpecs.${type}`;
    if (!["Master", "Worker"].includes(type)) errs.push(`${where}: replica type must be Master or Worker`);
    extra(r, PYTORCHJOB_FIELDS.replica, where);
    if (!Number.isInteger(r?.replicas) || r.replicas < 0) errs.push(`${where}.replicas: must be an integer >= 0`);
    if (type === "Master" && r?.replicas !== 1) errs.push(`${where}.replicas: must be 1`);
    if (r?.restartPolicy && !["Always", "OnFailure", "Never", "ExitCode"].includes(r.restartPolicy))
      errs.push(`${where}.restartPolicy: Unsupported value "${r.restartPolicy}"`);
    if (!(r?.template?.spec?.containers ?? []).some(c => c.name === "pytorch"))
      errs.push(`${where}.template.spec.containers: the training-operator needs a container named "pytorch"`);
    templates.push({ apiVersion: "v1", kind: "PodTemplate",
                     metadata: { name: `${doc.metadata?.name ?? "pytorchjob"}-${type.toLowerCase()}` },
                     template: r?.template ?? {} });
  }
  if (doc.spec?.nprocPerNode != null && typeof doc.spec.nprocPerNode !== "string")
    errs.push("spec.nprocPerNode: must be a string");
  return { errs, templates };
}

async function schemaErrors(doc) {
  try {
    const mod = await import(modulePath(doc.apiVersion, doc.kind));
    new mod[doc.kind](doc).validate();
    return [];
  } catch (e) {
    if (e.code?.startsWith?.("ERR_")) return [`unknown apiVersion/kind (${e.code})`];
    return [e.errors ? e.errors.map(x => `${x.instancePath || "/"} ${x.message}`).join("; ") : e.message];
  }
}

function strictErrors(items) {
  const dir = fs.mkdtempSync(path.join(HERE, ".strict-"));
  try {
    items.forEach(({ doc }, n) => fs.writeFileSync(path.join(dir, `d${n}.ts`),
      `import type { I${doc.kind} } from "${modulePath(doc.apiVersion, doc.kind)}";\n` +
      `export const d: I${doc.kind} =\n${JSON.stringify(doc, null, 1)};\n`));
    fs.writeFileSync(path.join(dir, "tsconfig.json"), JSON.stringify({ compilerOptions: {
      strict: true, noEmit: true, module: "nodenext", moduleResolution: "nodenext", target: "es2022",
      skipLibCheck: true, types: [] }, include: ["*.ts"] }));
    let out = "";
    try { execFileSync(process.execPath, [path.join(HERE, "node_modules/typescript/bin/tsc"), "-p", dir], { encoding: "utf8" }); }
    catch (e) { out = (e.stdout || "") + (e.stderr || ""); }
    const byDoc = new Map();
    for (const line of out.split("\n")) {
      const m = line.match(/d(\d+)\.ts\(\d+,\d+\): error TS\d+: (.*)/);
      if (m) byDoc.set(+m[1], [...(byDoc.get(+m[1]) ?? []), m[2]]);
    }
    return byDoc;
  } finally { fs.rmSync(dir, { recursive: true, force: true }); }
}

let bad = 0, total = 0;
const passed = [];
for (const file of args) {
  let docs;
  try { docs = yaml.loadAll(fs.readFileSync(file, "utf8")).filter(Boolean); }
  catch (e) { console.log(`INVALID ${file}: YAML: ${e.message.split("\n")[0]}`); bad++; continue; }
  if (docs.length === 0) { console.log(`INVALID ${file}: no documents`); bad++; continue; }
  for (const [i, doc] of docs.entries()) {
    total++;
    const where = `${file}#${i} ${doc.apiVersion}/${doc.kind} ${doc.metadata?.name ?? ""}`;
    let errs = [], checked = [doc];
    if (doc.apiVersion === "kubeflow.org/v1" && doc.kind === "PyTorchJob") {
      const r = pytorchJobRules(doc);
      errs = r.errs;
      checked = r.templates;
    }
    for (const d of checked) errs.push(...await schemaErrors(d));
    if (doc.apiVersion === "batch/v1" && doc.kind === "Job" && errs.length === 0) errs = jobRules(doc);
    if (errs.length) { bad++; console.log(`INVALID ${where}: ${errs.join("; ")}`); continue; }
    if (!STRICT) { console.log(`valid   ${where}`); continue; }
    checked.forEach(d => passed.push({ doc: d, where }));
  }
}
if (STRICT && passed.length) {
  const byDoc = strictErrors(passed);
  const failed = new Map();
  passed.forEach(({ where }, n) => { if (byDoc.has(n)) failed.set(where, [...(failed.get(where) ?? []), ...byDoc.get(n)]); });
  for (const where of new Set(passed.map(p => p.where))) {
    if (failed.has(where)) { bad++; console.log(`INVALID ${where}: strict: ${failed.get(where).join("; ")}`); }
    else console.log(`valid   ${where} (strict)`);
  }
}
if (total === 0 && bad === 0) { console.log("no documents given"); process.exit(1); }
process.exit(bad ? 1 : 0);
