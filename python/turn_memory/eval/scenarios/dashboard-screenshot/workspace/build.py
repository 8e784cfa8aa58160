"""Render dashboards/specs.py to dashboards/<name>.json (Grafana dashboard model, schema 39)."""

import json
from pathlib import Path

from dashboards.specs import DASHBOARDS


def panel(i: int, spec: dict) -> dict:
    return {"id": i + 1, "type": "timeseries", "title": spec["title"],
            "gridPos": {"x": (i % 2) * 12, "y": (i // 2) * 8, "w": 12, "h": 8},
            "fieldConfig": {"defaults": {"unit": spec["unit"]}, "overrides": []},
            "targets": [{"refId": "A", "expr": spec["expr"], "datasource": {"type": "prometheus", "uid": "prom-main"}}]}


def main() -> None:
    for name, (title, specs) in DASHBOARDS.items():
        model = {"uid": f"opsboard-{name}", "title": title, "schemaVersion": 39, "refresh": "30s",
                 "time": {"from": "now-6h", "to": "now"}, "panels": [panel(i, s) for i, s in enumerate(specs)]}
        path = Path("dashboards") / f"{name}.json"
        path.write_text(json.dumps(model, indent=2) + "\n")
        print(f"wrote {path} ({len(specs)} panels)")


if __name__ == "__main__":
    main()
