#!/bin/bash
python3 - <<'EOF'
import csv
users = {r['user_id']: r['name'] for r in csv.DictReader(open('/app/users.csv'))}
totals = {u: 0 for u in users}
for r in csv.DictReader(open('/app/purchases.csv')):
    totals[r['user_id']] += int(r['price'])
with open('/app/report.csv', 'w') as f:
    f.write('name,total\n')
    for uid, name in sorted(users.items(), key=lambda kv: kv[1]):
        f.write(f'{name},{totals[uid]}\n')
EOF
