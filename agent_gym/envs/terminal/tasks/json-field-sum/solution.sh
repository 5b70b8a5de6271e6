#!/bin/bash
python3 -c "import json; rows=[json.loads(l) for l in open('/app/orders.jsonl') if l.strip()]; print(f'{sum(r[\"amount\"] for r in rows if r[\"status\"]==\"paid\"):.2f}')" > /app/paid_total.txt
