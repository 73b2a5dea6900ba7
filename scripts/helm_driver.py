#!/usr/bin/env python3
"""Runs real Helm (Helm's Go library through helm-sdkpy) for crates/kopper/tests/e2e/chart.rs.

    helm_driver.py lint CHART
    helm_driver.py install|upgrade KUBECONFIG NAMESPACE RELEASE CHART VALUES_JSON
    helm_driver.py uninstall KUBECONFIG NAMESPACE RELEASE

Prints Helm's answer as JSON on stdout; on failure prints Helm's error on stderr and exits 1.
"""

import asyncio
import json
import sys

import helm_sdkpy as helm


async def main(argv):
    action = argv[0]
    if action == "lint":
        return await helm.Lint(helm.Configuration()).run(argv[1])
    kubeconfig, namespace, release = argv[1], argv[2], argv[3]
    config = helm.Configuration(namespace=namespace, kubeconfig=kubeconfig)
    if action == "uninstall":
        return await helm.Uninstall(config).run(release, wait=False)
    chart, values = argv[4], json.loads(argv[5])
    # kubesim runs no workload controllers, so nothing would ever become ready: do not wait.
    if action == "install":
        return await helm.Install(config).run(release, chart, values=values, create_namespace=True, wait=False)
    if action == "upgrade":
        return await helm.Upgrade(config).run(release, chart, values=values, wait=False)
    raise SystemExit(f"unknown action {action}")


if __name__ == "__main__":
    try:
        result = asyncio.run(main(sys.argv[1:]))
    except helm.HelmError as error:
        print(f"{type(error).__name__}: {error}", file=sys.stderr)
        sys.exit(1)
    print(json.dumps(result, default=str))
