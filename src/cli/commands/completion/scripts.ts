/**
 * The shell scripts `atelier completion bash|zsh|fish` prints. Each asks the CLI itself
 * (`atelier __complete -- WORDS…`) for the words that fit, one a line as `word<TAB>what it is`,
 * so that they follow the command tree and the server's workshops without being regenerated.
 * No line at all: the shell completes file names (a `--repo` path, a file for `--devcontainer`).
 */
export const SHELLS = ['bash', 'zsh', 'fish'] as const;
export type Shell = (typeof SHELLS)[number];

const BASH = `# atelier completion for bash: add to ~/.bashrc
#   source <(atelier completion bash)
_atelier_complete() {
  local cur=\${COMP_WORDS[COMP_CWORD]} line value
  local IFS=$'\\n'
  COMPREPLY=()
  for line in $("\${COMP_WORDS[0]}" __complete -- "\${COMP_WORDS[@]:1:COMP_CWORD}" 2>/dev/null); do
    value=\${line%%$'\\t'*}
    # bash split --flag=value at "=": the word being completed is the value alone.
    if [[ $cur != -* && $value == --*=* ]]; then value=\${value#*=}; fi
    COMPREPLY+=("$value")
  done
}
complete -o default -F _atelier_complete atelier
`;

const ZSH = `#compdef atelier
# atelier completion for zsh: add to ~/.zshrc (after compinit)
#   source <(atelier completion zsh)
_atelier() {
  local -a lines described
  local line value what
  lines=("\${(@f)$("\${words[1]}" __complete -- "\${(@)words[2,CURRENT]}" 2>/dev/null)}")
  for line in "\${lines[@]}"; do
    [[ -z $line ]] && continue
    value=\${line%%$'\\t'*}
    what=\${line#*$'\\t'}
    [[ $what == "$line" ]] && what=
    described+=("\${value//:/\\\\:}\${what:+:$what}")
  done
  if (( \${#described} == 0 )); then
    _files
    return
  fi
  _describe -V atelier described
}
if [[ "\${funcstack[1]}" == _atelier ]]; then
  _atelier "$@"
else
  compdef _atelier atelier
fi
`;

const FISH = `# atelier completion for fish: save as ~/.config/fish/completions/atelier.fish
#   atelier completion fish > ~/.config/fish/completions/atelier.fish
function __atelier_complete
  set -l words (commandline -opc)
  set -l current (commandline -ct)
  set -l out ($words[1] __complete -- $words[2..-1] "$current" 2>/dev/null)
  if test (count $out) -eq 0
    __fish_complete_path (commandline -ct)
    return
  end
  printf '%s\\n' $out
end
complete -c atelier -f -a '(__atelier_complete)'
`;

/** The completion script for `shell`. */
export function completionScript(shell: Shell): string {
  switch (shell) {
    case 'bash':
      return BASH;
    case 'zsh':
      return ZSH;
    case 'fish':
      return FISH;
  }
}
