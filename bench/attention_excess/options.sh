# The options run.sh and compare.sh share, sourced by them after they set their defaults: --context T, --head-dim D,
# --window W, --rounds N, --threads N, --march ARCH (sets T D W rounds threads march), and -h/--help (prints the
# script's header, lines 2 to $help_end of the file $self).
while [ $# -gt 0 ]; do
  case "$1" in
    --context) T="$2"; shift 2 ;;
    --head-dim) D="$2"; shift 2 ;;
    --window) W="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --march) march="$2"; shift 2 ;;
    -h|--help) sed -n "2,${help_end}p" "$self"; exit 0 ;;
    *) echo "$(basename "$0"): unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
