import sys

values = [float(line) for line in open(sys.argv[1])]
print(f"mean={sum(values) / len(values):.2f}")
