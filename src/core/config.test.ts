import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { formatSize, loadConfig, parseListen, parseSize } from './config.js';

describe('config', () => {
  it('parses sizes', () => {
    assert.equal(parseSize('512m'), 512 * 2 ** 20);
    assert.equal(parseSize('2G'), 2 * 2 ** 30);
    assert.equal(parseSize('1.5g'), 1.5 * 2 ** 30);
    assert.equal(parseSize('1048576'), 1048576);
    assert.equal(parseSize('64MiB'), 64 * 2 ** 20);
    assert.equal(parseSize('lots'), undefined);
    assert.equal(parseSize('-1g'), undefined);
  });

  it('parses listen addresses and refuses malformed ones', () => {
    assert.deepEqual(parseListen('127.0.0.1:7878'), { host: '127.0.0.1', port: 7878 });
    assert.deepEqual(parseListen('[::1]:0'), { host: '::1', port: 0 });
    assert.throws(() => parseListen('localhost'), /HOST:PORT/);
    assert.throws(() => parseListen('h:99999'), /HOST:PORT/);
  });

  it('reads ATELIER_* variables and refuses invalid ones with the variable name', () => {
    const c = loadConfig({ HOME: '/home/u', ATELIER_LISTEN: '0.0.0.0:1', ATELIER_ALLOW_REPO_ROOTS: '/a:/b', ATELIER_DATA_DIR: '/d' });
    assert.equal(c.listen, '0.0.0.0:1');
    assert.deepEqual(c.allowRepoRoots, ['/a', '/b']);
    assert.equal(c.dataDir, '/d');
    assert.equal(loadConfig({ HOME: '/home/u', XDG_CONFIG_HOME: '/x' }).configDir, '/x/atelier');
    assert.equal(loadConfig({ HOME: '/home/u', XDG_DATA_HOME: '/data' }).dataDir, '/data/atelier');
    assert.throws(() => loadConfig({ ATELIER_LOG_LEVEL: 'loud' }), /ATELIER_LOG_LEVEL/);
    assert.throws(() => loadConfig({ ATELIER_DEFAULT_CPUS: '-1' }), /ATELIER_DEFAULT_CPUS/);
  });

  it('reads the Teams webhook: https, or http to a loopback stand-in; anything else refused saying where to find the URL', () => {
    assert.deepEqual(loadConfig({ HOME: '/home/u' }).teams, {});
    const https = 'https://prod-01.westeurope.logic.azure.com:443/workflows/abc/triggers/manual/paths/invoke?sig=x';
    assert.equal(loadConfig({ HOME: '/home/u', ATELIER_TEAMS_WEBHOOK_URL: https }).teams.webhookUrl, https);
    assert.equal(
      loadConfig({ HOME: '/home/u', ATELIER_TEAMS_WEBHOOK_URL: 'http://127.0.0.1:9/hook' }).teams.webhookUrl,
      'http://127.0.0.1:9/hook',
    );
    for (const bad of ['http://teams.example/hook', 'ftp://x/y', 'not a url'])
      assert.throws(
        () => loadConfig({ HOME: '/home/u', ATELIER_TEAMS_WEBHOOK_URL: bad }),
        /invalid environment variable ATELIER_TEAMS_WEBHOOK_URL: expected the https URL of a Teams Workflows webhook \(in Teams: Workflows/,
      );
  });

  it('reads the disk quota settings, with their defaults, and refuses a size it cannot read', () => {
    const d = loadConfig({ HOME: '/home/u' });
    assert.deepEqual(
      [d.defaultDiskBytes, d.maxDiskBytes, d.diskReserveBytes, d.diskQuota, d.diskSpares],
      [5 * 2 ** 30, 100 * 2 ** 30, 2 * 2 ** 30, true, 1],
    );
    const c = loadConfig({
      HOME: '/home/u',
      ATELIER_DEFAULT_DISK: '20g',
      ATELIER_MAX_DISK: '1t',
      ATELIER_DISK_RESERVE: '512m',
      ATELIER_DISK_QUOTA: 'off',
      ATELIER_DISK_SPARES: '0',
    });
    assert.deepEqual(
      [c.defaultDiskBytes, c.maxDiskBytes, c.diskReserveBytes, c.diskQuota, c.diskSpares],
      [20 * 2 ** 30, 2 ** 40, 512 * 2 ** 20, false, 0],
    );
    assert.throws(() => loadConfig({ ATELIER_MAX_DISK: 'lots' }), /ATELIER_MAX_DISK: "lots" is not a size/);
    assert.throws(() => loadConfig({ ATELIER_DISK_QUOTA: 'maybe' }), /ATELIER_DISK_QUOTA/);
    assert.equal(formatSize(5 * 2 ** 30), '5.0g');
    assert.equal(formatSize(1.5 * 2 ** 20), '1.5m');
    assert.equal(formatSize(900), '900b');
  });

  it('reads what is kept for the server over all workshops, with its defaults, and refuses what it cannot read', () => {
    const d = loadConfig({ HOME: '/home/u' });
    assert.deepEqual([d.serverReserveMemoryBytes, d.workshopsCpuShares], [2 ** 30, 256]);
    const c = loadConfig({ HOME: '/home/u', ATELIER_SERVER_RESERVE_MEMORY: '2g', ATELIER_WORKSHOPS_CPU_SHARES: '1024' });
    assert.deepEqual([c.serverReserveMemoryBytes, c.workshopsCpuShares], [2 * 2 ** 30, 1024]);
    assert.throws(() => loadConfig({ ATELIER_SERVER_RESERVE_MEMORY: 'half' }), /ATELIER_SERVER_RESERVE_MEMORY: "half" is not a size/);
    assert.throws(() => loadConfig({ ATELIER_WORKSHOPS_CPU_SHARES: '4096' }), /ATELIER_WORKSHOPS_CPU_SHARES/);
  });

  it('reads the node heartbeat and dead-after durations, with their defaults, and refuses bad ones saying what to set', () => {
    const d = loadConfig({ HOME: '/home/u' });
    assert.deepEqual([d.nodeHeartbeatMs, d.nodeDeadAfterMs], [2000, 10_000]);
    const c = loadConfig({ HOME: '/home/u', ATELIER_NODE_HEARTBEAT: '500ms', ATELIER_NODE_DEAD_AFTER: '1.5s' });
    assert.deepEqual([c.nodeHeartbeatMs, c.nodeDeadAfterMs], [500, 1500]);
    assert.deepEqual(
      [loadConfig({ ATELIER_NODE_DEAD_AFTER: '1m' }).nodeDeadAfterMs, loadConfig({ ATELIER_NODE_HEARTBEAT: '3' }).nodeHeartbeatMs],
      [60_000, 3000],
    );
    assert.throws(
      () => loadConfig({ ATELIER_NODE_HEARTBEAT: 'often' }),
      /invalid environment variable ATELIER_NODE_HEARTBEAT: expected a duration from 100ms to 60s \(for example 500ms, 2s or 1m\), got "often"/,
    );
    assert.throws(() => loadConfig({ ATELIER_NODE_HEARTBEAT: '10ms' }), /ATELIER_NODE_HEARTBEAT: expected a duration from 100ms to 60s/);
    assert.throws(() => loadConfig({ ATELIER_NODE_DEAD_AFTER: '-3s' }), /ATELIER_NODE_DEAD_AFTER: expected a duration from 1s to 3600s/);
    // Fewer than 3 heartbeats in the timeout: a live node would be taken for dead after one slow heartbeat.
    assert.throws(
      () => loadConfig({ ATELIER_NODE_DEAD_AFTER: '5s' }),
      /ATELIER_NODE_DEAD_AFTER: 5000 ms is less than 3 heartbeats of 2000 ms \(ATELIER_NODE_HEARTBEAT, by default\): raise it to at least 6000 ms, or heartbeat more often/,
    );
  });
  it('reads the Workshop resource controller settings: off by default, the three together, the rest defaulted', () => {
    assert.equal(loadConfig({ HOME: '/home/u' }).kubeWorkshops, undefined);
    const c = loadConfig({
      HOME: '/home/u',
      ATELIER_K8S_KUBECONFIG: '/etc/kube/config',
      ATELIER_K8S_WORKSHOPS_NAMESPACE: 'atelier',
      ATELIER_K8S_WORKSHOPS_OWNER: 'kube-controller',
    });
    assert.deepEqual(c.kubeWorkshops, {
      kubeconfig: '/etc/kube/config',
      namespace: 'atelier',
      owner: 'kube-controller',
      tenant: 'default',
      leaseMs: 15_000,
      resyncMs: 5000,
    });
    const inCluster = loadConfig({
      ATELIER_K8S_KUBECONFIG: 'in-cluster',
      ATELIER_K8S_WORKSHOPS_NAMESPACE: 'atelier',
      ATELIER_K8S_WORKSHOPS_OWNER: 'kube-controller',
      ATELIER_K8S_LEASE_DURATION: '4s',
      KUBERNETES_SERVICE_HOST: '10.96.0.1',
      KUBERNETES_SERVICE_PORT: '443',
    }).kubeWorkshops;
    assert.equal(inCluster?.kubeconfig, 'in-cluster');
    assert.equal(inCluster?.leaseMs, 4000);
    assert.deepEqual(inCluster?.inCluster, { host: '10.96.0.1', port: 443 });
    assert.throws(
      () => loadConfig({ ATELIER_K8S_KUBECONFIG: '/etc/kube/config' }),
      /ATELIER_K8S_KUBECONFIG, ATELIER_K8S_WORKSHOPS_NAMESPACE and ATELIER_K8S_WORKSHOPS_OWNER go together .*: set all three or none/,
    );
    assert.throws(
      () => loadConfig({ ATELIER_K8S_LEASE_DURATION: '10ms' }),
      /ATELIER_K8S_LEASE_DURATION: expected a duration from 1s to 300s/,
    );
  });
});
