#!/bin/bash
python3 - <<'EOF'
import csv
rows = list(csv.DictReader(open('/app/people.csv')))
keep = sorted((r for r in rows if int(r['age']) >= 18), key=lambda r: (-int(r['age']), r['name']))
with open('/app/adults.csv', 'w', newline='') as f:
    w = csv.DictWriter(f, fieldnames=['name', 'age', 'city'])
    w.writeheader()
    w.writerows(keep)
EOF
