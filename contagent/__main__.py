from contagent.cli import main

main()
