// Validates the manifests in this directory: each object against the Kubernetes OpenAPI
// schema (kubernetes-models, whose validators are generated from it: types, required fields,
// formats), then what a schema cannot say but a kubelet needs: no unknown container field,
// probes and annotations naming ports that exist, mounts naming volumes that exist, a
// ConfigMap volume naming a ConfigMap defined here and mounted as a directory (a subPath
// mount never sees updates), a grace period that covers preStop plus rebound's drain, the
// proxy variables pointing at rebound's listener, and the non-root security context; a task
// store on a writable volume of the Pod's own (SQLite: a StatefulSet's claim, never one claim
// shared by replicas) or a database password from a mounted Secret (PostgreSQL); a
// NetworkPolicy for every workload that lets nothing but named peers reach the admin port.
// Writes each ConfigMap's rebound.yaml to OUT_DIR for `rebound check`.
import fs from 'fs';
import path from 'path';
import * as yaml from 'js-yaml';
import { Deployment } from 'kubernetes-models/apps/v1/Deployment';
import { StatefulSet } from 'kubernetes-models/apps/v1/StatefulSet';
import { ConfigMap } from 'kubernetes-models/v1/ConfigMap';
import { NetworkPolicy } from 'kubernetes-models/networking.k8s.io/v1/NetworkPolicy';

const [outDir, ...files] = process.argv.slice(2);
const models = { Deployment, StatefulSet, ConfigMap, NetworkPolicy };
const containerFields = new Set(['name', 'image', 'command', 'args', 'workingDir', 'ports', 'envFrom', 'env',
  'resources', 'resizePolicy', 'restartPolicy', 'volumeMounts', 'volumeDevices', 'livenessProbe', 'readinessProbe',
  'startupProbe', 'lifecycle', 'terminationMessagePath', 'terminationMessagePolicy', 'imagePullPolicy',
  'securityContext', 'stdin', 'stdinOnce', 'tty']);
const problems = [];
const configMaps = new Map();
const deployments = [];
const policies = [];

for (const file of files) {
  for (const doc of yaml.loadAll(fs.readFileSync(file, 'utf8'))) {
    if (!doc) continue;
    const where = `${path.basename(file)}: ${doc.kind}/${doc.metadata?.name}`;
    const Model = models[doc.kind];
    if (!Model) { problems.push(`${where}: no schema here for kind ${doc.kind}`); continue; }
    try { new Model(doc).validate(); } catch (e) { problems.push(`${where}: ${e.message}`); continue; }
    if (doc.kind === 'ConfigMap') configMaps.set(doc.metadata.name, doc);
    else if (doc.kind === 'NetworkPolicy') policies.push(doc);
    else deployments.push({ where, doc });
    console.log(`${where}: schema valid`);
  }
}

const seconds = (d) => { const m = /^(\d+)(ms|s|m)$/.exec(d ?? ''); return m ? Number(m[1]) * { ms: 0.001, s: 1, m: 60 }[m[2]] : NaN; };

for (const { where, doc } of deployments) {
  const spec = doc.spec.template.spec;
  const annotations = doc.spec.template.metadata?.annotations ?? {};
  const volumes = new Map((spec.volumes ?? []).map((v) => [v.name, v]));
  // A StatefulSet's claims are volumes of each Pod's own.
  for (const t of doc.spec.volumeClaimTemplates ?? []) volumes.set(t.metadata.name, { claimTemplate: t });
  const all = [...(spec.initContainers ?? []), ...(spec.containers ?? [])];
  const rebound = all.find((c) => c.name === 'rebound');
  if (!rebound) { problems.push(`${where}: no container named rebound`); continue; }
  for (const c of all) {
    const at = `${where}: container ${c.name}`;
    for (const k of Object.keys(c)) if (!containerFields.has(k)) problems.push(`${at}: unknown field ${k}`);
    const ports = new Map((c.ports ?? []).map((p) => [p.name, p.containerPort]));
    for (const probe of ['startupProbe', 'readinessProbe', 'livenessProbe']) {
      const port = c[probe]?.httpGet?.port;
      if (typeof port === 'string' && !ports.has(port)) problems.push(`${at}: ${probe} names port ${port}, which it does not declare`);
    }
    for (const m of c.volumeMounts ?? []) if (!volumes.has(m.name)) problems.push(`${at}: mounts undeclared volume ${m.name}`);
    const sc = c.securityContext ?? {};
    if (sc.readOnlyRootFilesystem !== true || sc.allowPrivilegeEscalation !== false ||
        !(sc.capabilities?.drop ?? []).includes('ALL'))
      problems.push(`${at}: securityContext must set readOnlyRootFilesystem, no privilege escalation, drop ALL`);
  }
  if (spec.securityContext?.runAsNonRoot !== true) problems.push(`${where}: pod securityContext.runAsNonRoot must be true`);
  if ((spec.initContainers ?? []).includes(rebound) && rebound.restartPolicy !== 'Always')
    problems.push(`${where}: rebound as an init container needs restartPolicy: Always (a native sidecar)`);

  const configArg = rebound.args?.[rebound.args.indexOf('--config') + 1];
  const mount = (rebound.volumeMounts ?? []).find((m) => configArg?.startsWith(m.mountPath + '/'));
  if (!mount) { problems.push(`${where}: rebound's --config ${configArg} is on no mounted volume`); continue; }
  if (mount.subPath) problems.push(`${where}: the config is mounted with subPath: ConfigMap updates would never reach it`);
  const cmName = volumes.get(mount.name)?.configMap?.name;
  const cm = configMaps.get(cmName);
  if (!cm) { problems.push(`${where}: the config volume names ConfigMap ${cmName}, not defined here`); continue; }
  const key = configArg.slice(mount.mountPath.length + 1);
  const text = cm.data?.[key];
  if (!text) { problems.push(`${where}: ConfigMap ${cmName} has no key ${key}`); continue; }
  const cfg = yaml.load(text);
  fs.writeFileSync(path.join(outDir, `${cmName}.${key}`), text);

  const adminAddress = String((typeof cfg.admin === 'object' ? cfg.admin?.listen : cfg.admin) ?? '127.0.0.1:9901');
  const adminPort = Number(adminAddress.split(':').pop());
  const listen = String(cfg.listen ?? '127.0.0.1:3128');
  if (adminAddress.startsWith('127.')) problems.push(`${where}: admin binds loopback: the kubelet's probes cannot reach it`);
  const declared = (rebound.ports ?? []).find((p) => p.name === 'admin')?.containerPort;
  if (declared !== adminPort) problems.push(`${where}: port admin is ${declared}, the config's admin port is ${adminPort}`);
  if (Number(annotations['prometheus.io/port']) !== adminPort) problems.push(`${where}: prometheus.io/port is not the admin port`);
  if (cfg.watch_config !== true) problems.push(`${where}: watch_config should be true so ConfigMap updates apply`);
  const preStop = Number(rebound.lifecycle?.preStop?.exec?.command?.[1] ?? 0);
  const grace = spec.terminationGracePeriodSeconds ?? 30;
  const drain = seconds(cfg.drain_timeout ?? '10s');
  if (!(grace >= preStop + drain)) problems.push(`${where}: terminationGracePeriodSeconds ${grace} < preStop ${preStop}s + drain_timeout ${drain}s`);
  const app = (spec.containers ?? []).find((c) => c !== rebound);
  for (const name of ['HTTP_PROXY', 'http_proxy']) {
    const v = app?.env?.find((e) => e.name === name)?.value;
    if (v !== `http://${listen.replace('0.0.0.0', '127.0.0.1')}`) problems.push(`${where}: app ${name} is ${v}, rebound listens on ${listen}`);
  }
  if (!app?.env?.some((e) => e.name === 'NO_PROXY')) problems.push(`${where}: app sets no NO_PROXY`);
  if (!rebound.resources?.requests?.cpu || !rebound.resources?.limits?.memory) problems.push(`${where}: rebound needs CPU requests and a memory limit`);

  // The task store: opened when `store:` is set or a dependency hands calls over.
  const handsOver = Object.values(cfg.dependencies ?? {}).some((d) => ['async', 'webhook', 'batch'].includes(d?.context));
  const store = cfg.store ?? (handsOver ? {} : null);
  const mountOf = (file) => (rebound.volumeMounts ?? [])
    .filter((m) => file.startsWith(m.mountPath.replace(/\/$/, '') + '/'))
    .sort((a, b) => b.mountPath.length - a.mountPath.length)[0];
  if (store && (store.type ?? 'sqlite') === 'sqlite') {
    const file = store.path ?? '/var/lib/rebound/rebound.db';
    const m = mountOf(file);
    const v = m && volumes.get(m.name);
    if (!m) problems.push(`${where}: the SQLite store ${file} is on no mounted volume (the root filesystem is read-only)`);
    else if (m.readOnly) problems.push(`${where}: the SQLite store's volume ${m.name} is mounted read-only`);
    else if (v?.configMap || v?.secret) problems.push(`${where}: the SQLite store's volume ${m.name} is a ConfigMap or Secret`);
    else if (doc.kind === 'Deployment' && (doc.spec.replicas ?? 1) > 1 && v?.persistentVolumeClaim)
      problems.push(`${where}: ${doc.spec.replicas} replicas would share one SQLite file (one process per file): use a StatefulSet's volumeClaimTemplates`);
    else if (v?.emptyDir) problems.push(`${where}: the SQLite store is on an emptyDir: accepted calls would die with the Pod`);
    if (m && !spec.securityContext?.fsGroup) problems.push(`${where}: no fsGroup: rebound (uid 10001) may not write its store's volume`);
  }
  if (store?.type === 'postgres') {
    const m = store.password_file && mountOf(store.password_file);
    if (!m || !volumes.get(m.name)?.secret) problems.push(`${where}: store.password_file is not on a mounted Secret`);
    if (/password=/.test(store.dsn ?? '')) problems.push(`${where}: the DSN carries a password (R-9): use password_file`);
  }

  // The admin port is kept to named peers: a NetworkPolicy selects the Pod, and every rule
  // that admits the admin port names where from.
  const labels = doc.spec.template.metadata?.labels ?? {};
  const selecting = policies.filter((p) => Object.entries(p.spec.podSelector?.matchLabels ?? {}).every(([k, v]) => labels[k] === v) &&
    (p.spec.policyTypes ?? ['Ingress']).includes('Ingress'));
  if (!selecting.length) problems.push(`${where}: no NetworkPolicy selects its Pods: the admin port is open to the cluster`);
  for (const p of selecting)
    for (const rule of p.spec.ingress ?? []) {
      const admits = !rule.ports || rule.ports.some((x) => x.port === adminPort || x.port === 'admin');
      if (admits && !(rule.from ?? []).length)
        problems.push(`${where}: NetworkPolicy ${p.metadata.name} admits the admin port ${adminPort} from anywhere`);
    }
  console.log(`${where}: kubelet checks done (grace ${grace}s >= preStop ${preStop}s + drain ${drain}s, store ${store ? store.type ?? 'sqlite' : 'none'})`);
}

for (const p of problems) console.error(`invalid: ${p}`);
process.exit(problems.length ? 1 : 0);
