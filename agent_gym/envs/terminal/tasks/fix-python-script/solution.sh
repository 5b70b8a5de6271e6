#!/bin/bash
cat > /app/stats.py <<'EOF'
import sys

values = [float(line) for line in open(sys.argv[1]) if line.strip()]
print(f"mean={sum(values) / len(values):.2f}")
EOF
